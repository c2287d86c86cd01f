"""The Agent API's HTTP messages as typed structs (docs/contract.md §6b); decoding is strict on
types and tolerant of fields a newer server adds (`frames.lenient`).

The WebSocket frames are defined once, in `frames.py` (the server encodes and decodes the very
same structs); the names an agent reads them by are aliases of those: `DeliverySay` is the
`delivery.say` frame, `AckResult` the `delivery.acked` frame (also the HTTP ack's answer),
`Fact` one fact of a closing.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .frames import AckedFrame, AckStatus, DeliverySayFrame, Fact

# The frames, by the names the client has always exported them under.
DeliverySay = DeliverySayFrame
AckResult = AckedFrame

__all__ = [
    "AckResult",
    "AckStatus",
    "DeliverySay",
    "Fact",
    "HoldlineError",
    "OperationRef",
    "PendingDelivery",
    "PendingUpdates",
    "ToolCall",
    "ToolCallResult",
    "ToolCallsResponse",
    "ToolFormat",
    "ack_body",
    "signal_body",
]

ToolFormat = Literal["openai", "anthropic", "json-schema"]


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One call the agent's model made: `arguments` as an object or the JSON string it emitted."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)


class OperationRef(msgspec.Struct, frozen=True, kw_only=True):
    """An operation a call created or joined."""

    operation_id: str
    tool: str
    status: str
    batch_id: str | None = None


class ToolCallResult(msgspec.Struct, frozen=True, kw_only=True):
    """The answer for one call: `output` is what to hand the model as the tool's result."""

    tool_call_id: str
    output: str
    operations: list[OperationRef] = msgspec.field(default_factory=list)


class ToolCallsResponse(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/sessions/{id}/tool-calls`: one batch per request (None when nothing new)."""

    turn_id: str
    batch_id: str | None
    results: list[ToolCallResult]


class PendingDelivery(msgspec.Struct, frozen=True, kw_only=True):
    """An update that found no proactive window: fold it into the next model call."""

    delivery_id: str
    text: str
    facts: list[Fact] = msgspec.field(default_factory=list)


class PendingUpdates(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/sessions/{id}/pending`: the updates and one text to prepend to the model call."""

    deliveries: list[PendingDelivery]
    context: str


class HoldlineError(Exception):
    """A problem+json answer, or an error frame on the agent stream."""

    def __init__(self, status: int, type: str, title: str, detail: str = "") -> None:
        super().__init__(f"{status} {title}: {detail}" if detail else f"{status} {title}")
        self.status = status
        self.type = type
        self.title = title
        self.detail = detail


def signal_body(user_speaking: bool | None, agent_speaking: bool | None) -> dict[str, bool]:
    """A signal's fields, without the ones left out."""
    body: dict[str, bool] = {}
    if user_speaking is not None:
        body["user_speaking"] = user_speaking
    if agent_speaking is not None:
        body["agent_speaking"] = agent_speaking
    return body


def ack_body(status: AckStatus, heard_text: str | None, turn_id: str | None) -> dict[str, Any]:
    """The acknowledgement's fields, without the ones left out."""
    body: dict[str, Any] = {"status": status}
    if heard_text is not None:
        body["heard_text"] = heard_text
    if turn_id is not None:
        body["turn_id"] = turn_id
    return body
