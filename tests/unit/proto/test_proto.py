"""The checked-in bus contract (proto/) is current, valid and covers every event type."""

from __future__ import annotations

import copy
import json
import typing
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.validators import validator_for

from devtools import consumer_table, proto
from devtools.declared import declared
from libs.bus import Topology
from libs.bus.deadletter import DEAD_LETTER_ENCODER, DeadLetter
from libs.events import (
    BargeIn,
    BatchEvent,
    BatchOpened,
    ControlEvent,
    DeliveryEvent,
    DeliveryReady,
    Envelope,
    ExecuteOperation,
    InteractionEvent,
    OperationCommitted,
    OperationEvent,
    SessionOpened,
    WorkCommand,
    encode,
)

PROTO = Path(__file__).resolve().parents[3] / "proto"
VENDORED = PROTO / "vendor" / "asyncapi-3.0.0.schema.json"
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# Listed here rather than taken from the generator, so a union it forgets is caught.
UNIONS: dict[str, Any] = {
    "interaction": InteractionEvent,
    "control": ControlEvent,
    "operations": OperationEvent,
    "batches": BatchEvent,
    "deliveries": DeliveryEvent,
    "work": WorkCommand,
}


def _tags(union: Any) -> list[str]:
    return [cls.__struct_config__.tag for cls in typing.get_args(union)]


def _load(path: Path) -> Any:
    return json.loads(path.read_bytes())


def _envelope(event: Any, **ids: Any) -> dict[str, Any]:
    data = encode(Envelope(event_id="e1", occurred_at=T0, session_id="s1", event=event, **ids))
    result: dict[str, Any] = json.loads(data)
    return result


SAMPLES: list[tuple[str, dict[str, Any]]] = [
    (
        "operation.committed",
        _envelope(OperationCommitted(result={"id": 7}, provider_ref="p1"), operation_id="o1"),
    ),
    (
        "session.opened",
        _envelope(SessionOpened(user_id="u1", tenant_id="t1", agent="a", token_hash="h")),
    ),
    (
        "delivery.ready",
        _envelope(
            DeliveryReady(
                kind="final", text="Done.", short_text="Done", source_operation_ids=("o1",)
            ),
            delivery_id="d1",
        ),
    ),
    ("batch.opened", _envelope(BatchOpened(operation_ids=("o1", "o2")), batch_id="b1")),
    ("control.barge_in", _envelope(BargeIn(played_ms=120, unheard_ms=800))),
    ("work.execute", _envelope(ExecuteOperation(), operation_id="o1")),
    (
        "dead_letter",
        json.loads(
            DEAD_LETTER_ENCODER.encode(
                DeadLetter(
                    source_stream="HL_WORK",
                    source_subject="hl.work.s1.o1",
                    source_seq=3,
                    consumer="operation-worker-work",
                    num_delivered=5,
                    reason="max_deliver",
                    error="boom",
                    payload=b"{}",
                    dead_lettered_at=T0,
                )
            )
        ),
    ),
]


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    return {p.stem: _load(p) for p in sorted((PROTO / "schemas").glob("*.json"))}


@pytest.fixture(scope="module")
def asyncapi() -> Any:
    return _load(PROTO / "asyncapi.json")


def _resolve(document: Any, ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node = document
    for part in ref[2:].split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _refs(node: Any) -> list[str]:
    """Every `$ref` string, except inside `examples` (sample documents, not schemas)."""
    if isinstance(node, dict):
        own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return own + [r for k, v in node.items() if k != "examples" for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


# (a) checked-in files are what the generator produces


def test_checked_in_files_are_up_to_date() -> None:
    expected = proto.generated_files(PROTO)
    stale = sorted(
        p.relative_to(PROTO).as_posix()
        for p in (PROTO / "schemas").glob("*.json")
        if p not in expected
    )
    differing = sorted(
        p.relative_to(PROTO).as_posix()
        for p, data in expected.items()
        if not p.exists() or p.read_bytes() != data
    )
    assert not differing, f"out of date (run `make proto`): {differing}"
    assert not stale, f"stale files no event produces: {stale}"


def test_generation_is_deterministic() -> None:
    assert proto.asyncapi_document() == proto.asyncapi_document()
    assert proto.json_schemas() == proto.json_schemas()


def test_check_reports_a_diff_for_an_edited_file(tmp_path: Path) -> None:
    proto.write(tmp_path)
    assert proto.check(tmp_path) == []
    target = tmp_path / "schemas" / "operation.committed.json"
    target.write_text(target.read_text().replace("operation.committed", "operation.renamed"))
    (tmp_path / "schemas" / "operation.removed.json").write_text("{}\n")
    diffs = "".join(proto.check(tmp_path))
    assert "--- a/" in diffs
    assert "schemas/operation.committed.json" in diffs
    assert "schemas/operation.removed.json" in diffs
    assert proto.main(["--check", "--root", str(tmp_path)]) == 1


# (b) JSON Schemas: valid 2020-12, accept real envelopes, refuse malformed ones


def test_every_schema_is_a_valid_draft_2020_12_schema(schemas: dict[str, Any]) -> None:
    assert schemas
    for name, schema in schemas.items():
        Draft202012Validator.check_schema(schema)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        assert schema["$id"] == f"https://holdline.dev/schemas/{name}.json"
        assert schema["title"] == name


@pytest.mark.parametrize(("name", "sample"), SAMPLES, ids=[name for name, _ in SAMPLES])
def test_real_messages_validate(schemas: dict[str, Any], name: str, sample: dict[str, Any]) -> None:
    Draft202012Validator(schemas[name]).validate(sample)


def _mutations() -> list[tuple[str, dict[str, Any]]]:
    base = dict(SAMPLES[0][1])
    return [
        ("unknown envelope field", {**base, "surprise": 1}),
        ("unknown event field", {**base, "event": {**base["event"], "surprise": 1}}),
        ("wrong type", {**base, "event": {**base["event"], "type": "operation.cancelled"}}),
        ("wrong schema version", {**base, "schema_version": 2}),
        ("missing session", {k: v for k, v in base.items() if k != "session_id"}),
    ]


@pytest.mark.parametrize(("case", "bad"), _mutations(), ids=[c for c, _ in _mutations()])
def test_malformed_messages_are_refused(
    schemas: dict[str, Any], case: str, bad: dict[str, Any]
) -> None:
    assert not Draft202012Validator(schemas["operation.committed"]).is_valid(bad), case


def test_another_events_body_is_refused(schemas: dict[str, Any]) -> None:
    committed = SAMPLES[0][1]
    assert not Draft202012Validator(schemas["operation.cancelled"]).is_valid(committed)


def test_schemas_agree_with_the_strict_decoder(schemas: dict[str, Any]) -> None:
    # The samples are what the runtime itself accepts, so schema and decoder agree on them.
    for name, sample in SAMPLES:
        if name == "dead_letter":
            msgspec.json.decode(json.dumps(sample), type=DeadLetter)
        else:
            msgspec.json.decode(json.dumps(sample), type=Envelope[Any])
        assert Draft202012Validator(schemas[name]).is_valid(sample)


# (c) the AsyncAPI document against the official AsyncAPI 3.0.0 JSON Schema


def test_asyncapi_document_validates_against_the_official_schema(asyncapi: Any) -> None:
    official = _load(VENDORED)
    assert official["properties"]["asyncapi"]["const"] == "3.0.0"
    # The "without-$id" bundle only refers within itself, so no registry is needed.
    assert all(ref.startswith("#") for ref in _refs(official))
    validator_cls = validator_for(official, default=None)
    assert validator_cls is Draft7Validator, official.get("$schema")
    errors = sorted(validator_cls(official).iter_errors(asyncapi), key=lambda e: e.json_path)
    assert not errors, "\n".join(f"{e.json_path}: {e.message[:300]}" for e in errors[:10])


@pytest.mark.parametrize(
    "mutate",
    [
        # AsyncAPI 2.x vocabulary and an OpenAPI-style discriminator are not 3.0.0.
        lambda d: d["operations"]["holdline-operator.send.work"].update(action="publish"),
        lambda d: d["channels"]["work"].update(subscribe={}),
        lambda d: d["components"]["schemas"]["OperationCommitted"].update(
            discriminator={"propertyName": "type"}
        ),
    ],
    ids=["v2-action", "v2-channel-field", "object-discriminator"],
)
def test_official_schema_refuses_invalid_documents(
    asyncapi: Any, mutate: Callable[[Any], None]
) -> None:
    official = _load(VENDORED)
    document = copy.deepcopy(asyncapi)
    mutate(document)
    assert not Draft7Validator(official).is_valid(document)


def test_asyncapi_document_shape(asyncapi: Any) -> None:
    assert asyncapi["asyncapi"] == "3.0.0"
    assert asyncapi["info"]["title"] == "holdline"
    assert asyncapi["info"]["version"] == proto.API_VERSION
    assert asyncapi["defaultContentType"] == "application/json"
    operations = asyncapi["channels"]["operations"]
    assert operations["address"] == "hl.operations.{session_id}.{operation_id}.{kind}"
    kinds = operations["parameters"]["kind"]["enum"]
    assert "committed" in kinds
    assert len(kinds) == len(set(kinds)) == len(operations["messages"])
    assert operations["x-stream"] == "HL_OPERATIONS"
    # Batches and deliveries are addressed by kind the same way.
    for name, aggregate, kind in (("batches", "batch_id", "drained"),
                                  ("deliveries", "delivery_id", "decided")):
        channel = asyncapi["channels"][name]
        assert channel["address"] == f"hl.{name}.{{session_id}}.{{{aggregate}}}.{{kind}}"
        kinds = channel["parameters"]["kind"]["enum"]
        assert kind in kinds
        assert len(kinds) == len(set(kinds)) == len(channel["messages"])
    assert asyncapi["channels"]["dlq"]["address"] == "hl.dlq.{source}.{session_id}"
    for channel in asyncapi["channels"].values():
        placeholders = {
            part[1:-1] for part in channel["address"].split(".") if part.startswith("{")
        }
        assert placeholders == set(channel.get("parameters", {})), channel["address"]


def test_every_reference_resolves_and_operations_use_their_channels_messages(
    asyncapi: Any,
) -> None:
    for ref in _refs(asyncapi):
        _resolve(asyncapi, ref)
    for op_id, operation in asyncapi["operations"].items():
        channel_ref = operation["channel"]["$ref"]
        assert operation["messages"], op_id
        for message in operation["messages"]:
            assert message["$ref"].startswith(f"{channel_ref}/messages/"), (op_id, message)


def test_services_roles(asyncapi: Any) -> None:
    def channels(service: str, action: str) -> set[str]:
        return {
            op["channel"]["$ref"].rsplit("/", 1)[1]
            for op in asyncapi["operations"].values()
            if op["action"] == action and op["tags"] == [{"name": service}]
        }

    assert channels("interaction-surface", "send") == {
        "interaction",
        "control",
        "operations",
        "batches",
        "deliveries",
    }
    assert channels("interaction-surface", "receive") == {"deliveries"}
    # The worker runs operations from their events: only an operator writes work commands.
    assert channels("operation-worker", "send") == {"operations", "dlq"}
    assert channels("operation-worker", "receive") == {"work", "operations"}
    assert channels("holdline-operator", "send") == {"work", "operations"}
    assert channels("batch-coordinator", "receive") == {"operations", "batches"}
    # Operations: only a silent member's `interrupted` rejection.
    assert channels("batch-coordinator", "send") == {"batches", "deliveries", "operations"}
    assert channels("delivery-policy", "receive") == {"deliveries", "interaction", "operations"}
    assert channels("delivery-policy", "send") == {"deliveries"}
    opened = asyncapi["operations"]["interaction-surface.send.batches"]["messages"]
    assert opened == [{"$ref": "#/channels/batches/messages/BatchOpened"}]
    # The coordinator's batches consumer asks the broker for `batch.opened` only.
    taken = asyncapi["operations"]["batch-coordinator.receive.batches"]["messages"]
    assert taken == [{"$ref": "#/channels/batches/messages/BatchOpened"}]


def test_receive_operations_are_the_declared_consumers(asyncapi: Any) -> None:
    # Every durable consumer a service declares (and so runs) is an operation receiving
    # exactly the kinds it asks the broker for; no receive operation is declared elsewhere.
    found = declared()
    received = {
        op_id: op for op_id, op in asyncapi["operations"].items() if op["action"] == "receive"
    }
    assert len(received) == len(found.consumers)
    for consumer in found.consumers:
        op = received[f"{consumer.service}.receive.{consumer.context.value}"]
        assert op["summary"] == consumer.summary
        channel = consumer.context.value
        names = {m["$ref"].removeprefix(f"#/channels/{channel}/messages/") for m in op["messages"]}
        expected = {k.__name__ for k in consumer.kinds} or set(
            asyncapi["channels"][channel]["messages"]
        )
        assert names == expected, consumer.role


def test_admission_kinds_are_the_surfaces_alone() -> None:
    # The surface sends admission's operation events and its follow-ups; the worker all
    # the others: the two declarations name the same kinds.
    sends = {(p.service, p.context.value): p for p in declared().publications}
    surface = sends[("interaction-surface", "operations")]
    worker = sends[("operation-worker", "operations")]
    assert surface.only
    assert set(surface.only) == set(worker.exclude)


def test_the_docs_consumer_table_is_the_declarations(tmp_path: Path) -> None:
    assert consumer_table.check() == [], "run `make proto`"
    text = consumer_table.DOCS_FILE.read_text(encoding="utf-8")
    table = consumer_table.table()
    assert table in text
    for consumer in declared().consumers:
        assert f"| `{consumer.durable(Topology())}" in table
    # A row edited by hand (a kind left out) is reported, and rewritten.
    docs = tmp_path / "architecture.md"
    docs.write_text(text.replace("| `admitted`, `cancel_requested` |", "| `admitted` |"))
    assert "+| `operation-worker-dispatch` | `HL_OPERATIONS` | `admitted`, `cancel_requested`" in (
        "".join(consumer_table.check(docs))
    )
    assert proto.main(["--check", "--docs", str(docs)]) == 1
    assert consumer_table.write(docs)
    assert docs.read_text() == text


@pytest.mark.parametrize(("name", "sample"), SAMPLES, ids=[name for name, _ in SAMPLES])
def test_real_messages_validate_against_asyncapi_payloads(
    asyncapi: Any, name: str, sample: dict[str, Any]
) -> None:
    # Payload schemas refer into components/schemas, so validate with the document as root.
    (message,) = [m for m in asyncapi["components"]["messages"].values() if m["name"] == name]
    root = {"$ref": message["payload"]["$ref"], "components": asyncapi["components"]}
    Draft7Validator(root).validate(sample)


# (d) coverage: every event type has a message on its stream's channel and a schema file


@pytest.mark.parametrize("context", sorted(UNIONS))
def test_every_event_has_a_message_and_a_schema(
    asyncapi: Any, schemas: dict[str, Any], context: str
) -> None:
    channel = asyncapi["channels"][context]
    on_channel = {_resolve(asyncapi, m["$ref"])["name"] for m in channel["messages"].values()}
    tags = _tags(UNIONS[context])
    assert tags
    assert set(tags) == on_channel
    missing = [tag for tag in tags if tag not in schemas]
    assert not missing, f"no schema file for {missing}"


def test_nothing_beyond_the_unions_and_dead_letters(asyncapi: Any, schemas: dict[str, Any]) -> None:
    known = {tag for union in UNIONS.values() for tag in _tags(union)} | {"dead_letter"}
    names = {m["name"] for m in asyncapi["components"]["messages"].values()}
    assert names == known
    assert set(schemas) == known
