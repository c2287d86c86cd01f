"""The Agent API's WebSocket frames (docs/contract.md §6b), and their AsyncAPI document.

Defined once, here, in the client distribution (it depends on msgspec only): the surface
imports them to decode what the agent sends (`CLIENT_FRAME`, strict) and to encode what it
pushes; the client reads the pushed frames with `lenient` (strict on types, tolerant of
fields a newer server adds); `devtools.proto` writes `proto/agent-asyncapi.json` from them, so
the published contract cannot drift from either side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec
from msgspec import inspect as mi

T = TypeVar("T")

AckStatus = Literal["started", "spoken", "unheard", "attached"]
Ref = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]
HeardText = Annotated[str, msgspec.Meta(max_length=4000)]
ADDRESS: Final = "/v1/sessions/{session_id}/agent"


class _Frame(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
             tag_field="type"):
    pass


# --------------------------------------------------------------------------- agent → holdline


class SignalFrame(_Frame, frozen=True, kw_only=True, tag="signal"):
    """The agent's view of the clocks: is the user speaking, is the agent playing audio."""

    user_speaking: bool | None = None
    agent_speaking: bool | None = None


class AckFrame(_Frame, frozen=True, kw_only=True, tag="delivery.ack"):
    """What became of a delivery: `spoken` only once its playback was confirmed."""

    delivery_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    status: AckStatus
    # With `unheard`: the words the user did hear before the cut.
    heard_text: HeardText | None = None
    turn_id: Ref | None = None


ClientFrame = SignalFrame | AckFrame
CLIENT_FRAME: Final = msgspec.json.Decoder(ClientFrame)


# --------------------------------------------------------------------------- holdline → agent


class Fact(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What one operation of a closing came to, for the agent's own model to phrase."""

    operation_id: str
    tool: str
    status: str
    summary: str


class HelloFrame(_Frame, frozen=True, kw_only=True, tag="hello"):
    """The connection is recorded (`channel.connected`); deliveries may follow."""

    session_id: str
    connection_id: str
    after: int


class DeliverySayFrame(_Frame, frozen=True, kw_only=True, tag="delivery.say"):
    """Say this now (`interrupt`: even over the user). `seq` resumes a reconnect (`after=`)."""

    seq: int
    delivery_id: str
    batch_id: str | None
    text: str
    facts: list[Fact]
    priority: Literal["normal", "urgent"]
    interrupt: bool


class AckedFrame(_Frame, frozen=True, kw_only=True, tag="delivery.acked"):
    """An acknowledgement is recorded; `delivery_status` is where the delivery stands now."""

    delivery_id: str
    status: AckStatus
    delivery_status: str


class ErrorFrame(_Frame, frozen=True, kw_only=True, tag="error"):
    """A frame was refused and nothing of it stored; the connection stays open."""

    code: str
    # The HTTP status the same mistake gets over HTTP.
    status: int
    detail: str
    delivery_id: str | None = None
    ack_status: str | None = None


ServerFrame = HelloFrame | DeliverySayFrame | AckedFrame | ErrorFrame
_ENCODER: Final = msgspec.json.Encoder()


def encode(frame: ServerFrame) -> str:
    """A server frame as the JSON text it travels as."""
    return _ENCODER.encode(frame).decode()


def lenient(data: Mapping[str, Any], kind: type[T], *, strict: bool = False) -> T:
    """`data` as `kind`, keeping only the fields this version knows (at every depth): a newer
    server may add fields; a wrong type is still refused (`msgspec.ValidationError`)."""
    return msgspec.convert(_known(data, mi.type_info(kind)), kind, strict=strict)


def _known(value: Any, info: mi.Type) -> Any:
    if isinstance(info, mi.StructType) and isinstance(value, Mapping):
        fields = {f.encode_name: f.type for f in info.fields}
        return {
            k: _known(v, fields[k]) if k in fields else v
            for k, v in value.items()
            if k in fields or k == info.tag_field
        }
    if isinstance(info, mi.ListType) and isinstance(value, list):
        return [_known(v, info.item_type) for v in value]
    if isinstance(info, mi.UnionType):
        structs = [t for t in info.types if isinstance(t, mi.StructType)]
        if len(structs) == 1:
            return _known(value, structs[0])
    return value


# --------------------------------------------------------------------------- AsyncAPI


def _key(kind: type[_Frame]) -> str:
    tag = kind.__struct_config__.tag
    assert isinstance(tag, str)
    return tag.replace(".", "_")


def asyncapi_document() -> dict[str, Any]:
    """AsyncAPI 3.0.0 for the agent channel: one WebSocket channel, two operations."""
    sent = (SignalFrame, AckFrame)
    received = (HelloFrame, DeliverySayFrame, AckedFrame, ErrorFrame)
    kinds: tuple[type[_Frame], ...] = (*sent, *received)
    payloads, schemas = msgspec.json.schema_components(
        kinds, ref_template="#/components/schemas/{name}"
    )
    messages = {
        _key(kind): {
            "name": kind.__name__,
            "title": kind.__struct_config__.tag,
            "summary": (kind.__doc__ or "").strip(),
            "contentType": "application/json",
            "payload": payload,
        }
        for kind, payload in zip(kinds, payloads, strict=True)
    }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "holdline Agent API channel",
            "version": "1.0.0",
            "description": (
                "The WebSocket an external agent (Pipecat, LiveKit Agents, OpenAI Realtime or "
                "Agents SDK) keeps open to holdline: closings to say come in as "
                "`delivery.say`; the agent reports signals and acknowledgements. Connect with "
                "`Authorization: Bearer <session token>` and `?after=<last seq seen>`, or "
                "`?ticket=` (from `POST /v1/sessions/{id}/ws-ticket`); `?token=<session "
                "token>` is accepted from a local caller only."
            ),
        },
        "servers": {
            "surface": {
                "host": "127.0.0.1:8080",
                "protocol": "ws",
                "description": "The interaction surface (docs/contract.md §6 ports).",
            }
        },
        "defaultContentType": "application/json",
        "channels": {
            "agent": {
                "address": ADDRESS,
                "title": "Agent channel",
                "description": "One per session; a newer connection replaces an older one.",
                "servers": [{"$ref": "#/servers/surface"}],
                "parameters": {"session_id": {"description": "The session's id."}},
                "messages": {
                    _key(kind): {"$ref": f"#/components/messages/{_key(kind)}"} for kind in kinds
                },
            }
        },
        "operations": {
            "agentSends": {
                "action": "send",
                "channel": {"$ref": "#/channels/agent"},
                "summary": "Signals and acknowledgements from the agent.",
                "messages": [{"$ref": f"#/channels/agent/messages/{_key(k)}"} for k in sent],
            },
            "agentReceives": {
                "action": "receive",
                "channel": {"$ref": "#/channels/agent"},
                "summary": "What holdline pushes to the agent.",
                "messages": [{"$ref": f"#/channels/agent/messages/{_key(k)}"} for k in received],
            },
        },
        "components": {"schemas": schemas, "messages": messages},
    }
