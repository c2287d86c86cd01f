"""The bus contract as files: one JSON Schema per event type and an AsyncAPI 3.0 document.

Everything is derived from the msgspec structs in `libs.events` and the subject layout in
`libs.bus.topology`, so `proto/` cannot drift from the code unnoticed:

    python -m devtools.proto           # rewrite proto/asyncapi.json, proto/agent-asyncapi.json,
                                       # proto/schemas/*.json and the consumer table of
                                       # docs/architecture.md (devtools.consumer_table)
    python -m devtools.proto --check   # exit 1 with a unified diff when they are out of date

The AsyncAPI operations are the services' declared roles on the bus (devtools.declared):
the consumers the runtime builds and the streams it appends to, never a table kept here.
A build tool, not installed with the runtime.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import msgspec

from devtools import consumer_table
from devtools.declared import Declared, declared
from holdline.client import frames as agent_frames
from libs.bus.deadletter import DeadLetter
from libs.bus.topology import Context, Topology, event_kind
from libs.events import (
    SCHEMA_VERSION,
    BatchEvent,
    ControlEvent,
    DeliveryEvent,
    Envelope,
    InteractionEvent,
    OperationEvent,
    WorkCommand,
)

ASYNCAPI_VERSION: Final = "3.0.0"
# Follows the envelope's schema version, so a breaking contract change shows in the document.
API_VERSION: Final = f"{SCHEMA_VERSION}.0.0"
JSON_SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE_URI: Final = "https://holdline.dev/schemas/"
DEAD_LETTER_NAME: Final = "dead_letter"
CONTENT_TYPE: Final = "application/json"

PROTO_DIR: Final = Path(__file__).resolve().parent.parent / "proto"
ASYNCAPI_FILE: Final = "asyncapi.json"
# The Agent API's WebSocket (holdline.client.frames): a channel of its own, not a bus subject.
AGENT_ASYNCAPI_FILE: Final = "agent-asyncapi.json"
SCHEMAS_DIR: Final = "schemas"

# The union each enveloped stream carries. The dead-letter stream carries bare DeadLetter
# records; any other context without an entry here stops generation.
STREAM_BODIES: Final[Mapping[Context, Any]] = {
    Context.INTERACTION: InteractionEvent,
    Context.CONTROL: ControlEvent,
    Context.OPERATIONS: OperationEvent,
    Context.BATCHES: BatchEvent,
    Context.DELIVERIES: DeliveryEvent,
    Context.WORK: WorkCommand,
}

_PARAMETERS: Final[Mapping[str, str]] = {
    "session_id": "Session id; every subject carries it so one session can be replayed.",
    "operation_id": "Operation id; one subject per operation aggregate.",
    "kind": (
        "The event's kind: its type after the context's name (`operation.`, `batch.`,"
        " `delivery.`). One aggregate's events are read together with `*` in its place;"
        " consumers filter on it."
    ),
    "batch_id": "Batch id; one subject per batch aggregate.",
    "delivery_id": "Delivery id; one subject per delivery aggregate.",
    "source": "Context of the stream the dead-lettered message came from.",
}

_PLACEHOLDER_RE: Final = re.compile(r"\{([A-Za-z0-9_-]+)\}")

StructType = type[msgspec.Struct]


def event_types(union: Any) -> tuple[StructType, ...]:
    """The struct classes of a union alias (a one-member "union" is the class itself)."""
    members: tuple[Any, ...] = typing.get_args(union) or (union,)
    for member in members:
        if not (isinstance(member, type) and issubclass(member, msgspec.Struct)):
            raise TypeError(f"{member!r} in {union!r} is not a msgspec Struct")
    return members


def tag_of(cls: StructType) -> str:
    """The wire `type` of an event struct."""
    tag = cls.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{cls.__name__} has no string tag")
    return tag


@dataclass(frozen=True, slots=True)
class _Message:
    """One message kind: its struct, its name on the wire and whether it is enveloped."""

    cls: StructType
    name: str
    enveloped: bool

    @property
    def key(self) -> str:
        return self.cls.__name__

    @property
    def wire_type(self) -> Any:
        envelope: Any = Envelope
        return envelope[self.cls] if self.enveloped else self.cls

    @property
    def summary(self) -> str:
        # Only the class's own docstring: a struct without one must not inherit msgspec's.
        doc = self.cls.__dict__.get("__doc__") or ""
        return doc.strip().split("\n\n")[0].replace("\n", " ")


def _messages() -> dict[Context, tuple[_Message, ...]]:
    by_context: dict[Context, tuple[_Message, ...]] = {}
    for context in Context:
        if context is Context.DLQ:
            by_context[context] = (_Message(DeadLetter, DEAD_LETTER_NAME, enveloped=False),)
            continue
        if context not in STREAM_BODIES:
            raise KeyError(f"no event union is mapped to stream context {context.value!r}")
        by_context[context] = tuple(
            _Message(cls, tag_of(cls), enveloped=True)
            for cls in event_types(STREAM_BODIES[context])
        )
    flat = [m for ms in by_context.values() for m in ms]
    # Names become file names and keys become component names: both must be unique.
    for attr in ("name", "key"):
        values = [getattr(m, attr) for m in flat]
        duplicates = sorted({v for v in values if values.count(v) > 1})
        if duplicates:
            raise ValueError(f"duplicate message {attr}s: {duplicates}")
    return by_context


def _all_messages() -> list[_Message]:
    return [m for ms in _messages().values() for m in ms]


def _dump(document: Mapping[str, Any]) -> bytes:
    text = json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False)
    return (text + "\n").encode("utf-8")


def json_schemas() -> dict[str, bytes]:
    """File name -> draft 2020-12 JSON Schema of the full wire message, one per event type."""
    out: dict[str, bytes] = {}
    for message in _all_messages():
        (root,), defs = msgspec.json.schema_components(
            [message.wire_type], ref_template="#/$defs/{name}"
        )
        # Inline the top-level struct so the file reads as "this message"; it is never
        # referenced from its own parts (an envelope does not nest envelopes).
        document: dict[str, Any] = defs.pop(root["$ref"].removeprefix("#/$defs/"))
        document.update(
            {
                "$schema": JSON_SCHEMA_DIALECT,
                "$id": f"{SCHEMA_BASE_URI}{message.name}.json",
                "title": message.name,
            }
        )
        if defs:
            document["$defs"] = defs
        out[f"{message.name}.json"] = _dump(document)
    return out


# Channel addresses come from the Topology builders themselves, called with placeholder
# tokens that are valid subject tokens and then swapped for AsyncAPI `{name}` parameters.
def _address(build: Callable[..., str], *names: str) -> str:
    subject = build(*(f"__{name}__" for name in names))
    for name in names:
        subject = subject.replace(f"__{name}__", f"{{{name}}}")
    return subject


def _dlq_address(topology: Topology) -> str:
    probe = Context.OPERATIONS
    subject = _address(lambda session: topology.dlq_subject(probe, session), "session_id")
    # The source is a Context, not a free token: swap the probe's token for the parameter.
    parts = subject.split(".")
    parts[parts.index(probe.value)] = "{source}"
    return ".".join(parts)


def _addresses(topology: Topology) -> dict[Context, str]:
    return {
        Context.INTERACTION: _address(topology.session_subject, "session_id"),
        Context.CONTROL: _address(topology.control_subject, "session_id"),
        Context.OPERATIONS: _address(
            topology.operation_event_subject, "session_id", "operation_id", "kind"
        ),
        Context.BATCHES: _address(
            topology.batch_event_subject, "session_id", "batch_id", "kind"
        ),
        Context.DELIVERIES: _address(
            topology.delivery_event_subject, "session_id", "delivery_id", "kind"
        ),
        Context.WORK: _address(topology.work_subject, "session_id", "operation_id"),
        Context.DLQ: _dlq_address(topology),
    }


@dataclass(frozen=True, slots=True)
class _Role:
    """One service sending or receiving on one stream, optionally only some message kinds."""

    service: str
    action: Literal["send", "receive"]
    context: Context
    summary: str
    only: tuple[StructType, ...] = ()
    exclude: tuple[StructType, ...] = ()

    @property
    def operation_id(self) -> str:
        return f"{self.service}.{self.action}.{self.context.value}"


def roles(found: Declared | None = None) -> tuple[_Role, ...]:
    """The AsyncAPI operations: what each service declares it receives (its durable
    consumers, with the kinds they ask the broker for) and sends (its publications)."""
    found = found or declared()
    receives = [
        _Role(c.service, "receive", c.context, c.summary, only=c.kinds) for c in found.consumers
    ]
    sends = [
        _Role(p.service, "send", p.context, p.summary, only=p.only, exclude=p.exclude)
        for p in found.publications
    ]
    every = (*receives, *sends)
    ids = [r.operation_id for r in every]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"one operation per service, action and stream; twice: {repeated}")
    return every


def _role_messages(role: _Role, channel: tuple[_Message, ...]) -> list[_Message]:
    present = {m.cls for m in channel}
    stray = [c.__name__ for c in (*role.only, *role.exclude) if c not in present]
    if stray:
        raise ValueError(f"{role.operation_id} names messages not on its channel: {stray}")
    return [
        m for m in channel if (not role.only or m.cls in role.only) and m.cls not in role.exclude
    ]


def _channel(
    topology: Topology, context: Context, address: str, messages: tuple[_Message, ...]
) -> dict[str, Any]:
    spec = topology.stream(context)
    parameters: dict[str, Any] = {}
    for name in _PLACEHOLDER_RE.findall(address):
        parameter: dict[str, Any] = {"description": _PARAMETERS[name]}
        if name == "source":
            parameter["enum"] = [c.value for c in Context if c is not Context.DLQ]
        elif name == "kind":
            parameter["enum"] = [event_kind(tag_of(m.cls)) for m in messages]
        elif all(m.enveloped for m in messages) and name in Envelope.__struct_fields__:
            parameter["location"] = f"$message.payload#/{name}"
        parameters[name] = parameter
    channel: dict[str, Any] = {
        "address": address,
        "title": spec.name,
        "description": f"{spec.description} Stored in JetStream stream {spec.name}.",
        "x-stream": spec.name,
        "messages": {m.key: {"$ref": f"#/components/messages/{m.key}"} for m in messages},
    }
    if parameters:
        channel["parameters"] = parameters
    return channel


def asyncapi_document() -> bytes:
    """The AsyncAPI 3.0.0 document of every stream, message and service role."""
    topology = Topology()
    by_context = _messages()
    addresses = _addresses(topology)
    flat = [m for ms in by_context.values() for m in ms]
    payloads, schemas = msgspec.json.schema_components(
        [m.wire_type for m in flat], ref_template="#/components/schemas/{name}"
    )
    messages = {
        m.key: {
            "name": m.name,
            "title": m.key,
            "summary": m.summary,
            "contentType": CONTENT_TYPE,
            "payload": payload,
        }
        for m, payload in zip(flat, payloads, strict=True)
    }
    channels = {
        context.value: _channel(topology, context, addresses[context], by_context[context])
        for context in Context
    }
    operations = {
        role.operation_id: {
            "action": role.action,
            "channel": {"$ref": f"#/channels/{role.context.value}"},
            "summary": role.summary,
            "tags": [{"name": role.service}],
            "messages": [
                {"$ref": f"#/channels/{role.context.value}/messages/{m.key}"}
                for m in _role_messages(role, by_context[role.context])
            ],
        }
        for role in roles()
    }
    document = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": "holdline",
            "version": API_VERSION,
            "description": (
                "Event-sourced services over NATS JetStream. Every message but a dead "
                "letter is an envelope whose `event` carries the tagged event, and is "
                f"published with the default subject prefix `{topology.prefix}`."
            ),
        },
        "defaultContentType": CONTENT_TYPE,
        "channels": channels,
        "operations": operations,
        "components": {"schemas": schemas, "messages": messages},
    }
    return _dump(document)


def generated_files(root: Path = PROTO_DIR) -> dict[Path, bytes]:
    """Every generated file under `root` with its expected content."""
    files = {
        root / ASYNCAPI_FILE: asyncapi_document(),
        root / AGENT_ASYNCAPI_FILE: _dump(agent_frames.asyncapi_document()),
    }
    files.update({root / SCHEMAS_DIR / name: data for name, data in json_schemas().items()})
    return files


def _stale(root: Path, expected: Mapping[Path, bytes]) -> list[Path]:
    # proto/schemas is fully generated: a file for a removed event is stale, not hand-written.
    return sorted(p for p in (root / SCHEMAS_DIR).glob("*.json") if p not in expected)


def check(root: Path = PROTO_DIR) -> list[str]:
    """Unified diffs between the files on disk and what the generator produces."""
    expected = generated_files(root)
    diffs: list[str] = []
    for path, data in sorted(expected.items()):
        actual = path.read_bytes() if path.exists() else b""
        if actual != data:
            diffs.append(_diff(root, path, actual, data))
    diffs.extend(_diff(root, path, path.read_bytes(), b"") for path in _stale(root, expected))
    return diffs


def _diff(root: Path, path: Path, actual: bytes, expected: bytes) -> str:
    name = path.relative_to(root.parent).as_posix()
    lines = difflib.unified_diff(
        actual.decode("utf-8").splitlines(keepends=True),
        expected.decode("utf-8").splitlines(keepends=True),
        fromfile=f"a/{name}",
        tofile=f"b/{name}",
    )
    return "".join(lines)


def write(root: Path = PROTO_DIR) -> list[Path]:
    """Write the generated files, remove stale schemas; returns the paths that changed."""
    expected = generated_files(root)
    changed: list[Path] = []
    for path, data in sorted(expected.items()):
        if not path.exists() or path.read_bytes() != data:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            changed.append(path)
    for path in _stale(root, expected):
        path.unlink()
        changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point: write the files and the docs' consumer table, or check
    them with --check."""
    parser = argparse.ArgumentParser(prog="python -m devtools.proto", description=__doc__)
    parser.add_argument(
        "--check", action="store_true", help="fail with a diff if proto/ is out of date"
    )
    parser.add_argument("--root", type=Path, default=PROTO_DIR, help="the proto directory")
    parser.add_argument(
        "--docs", type=Path, default=consumer_table.DOCS_FILE,
        help="the Markdown file holding the generated consumer table",
    )
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    docs: Path = args.docs.resolve()
    if args.check:
        diffs = check(root) + consumer_table.check(docs)
        if diffs:
            sys.stdout.write("".join(diffs))
            sys.stdout.write(
                f"\n{root} or {docs.name} is out of date: run `python -m devtools.proto`.\n"
            )
            return 1
        return 0
    for path in write(root):
        sys.stdout.write(f"wrote {path.relative_to(root.parent).as_posix()}\n")
    if consumer_table.write(docs):
        sys.stdout.write(f"wrote the consumer table of {docs.name}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
