"""The Agent API's request bodies (strict msgspec structs) and documented answers (pydantic
models for the OpenAPI document), and the pending-updates text."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from pydantic import BaseModel

from holdline.client.frames import AckStatus, HeardText, Ref

from .tool_formats import ToolCallsBody


class SignalsBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/sessions/{id}/signals`: the agent's view of the two clocks."""

    user_speaking: bool | None = None
    agent_speaking: bool | None = None


class AckBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/sessions/{id}/deliveries/{delivery_id}/ack`."""

    status: AckStatus
    heard_text: HeardText | None = None
    turn_id: Ref | None = None


AGENT_BODIES: dict[tuple[str, str], type[Any]] = {
    ("/v1/sessions/{session_id}/tool-calls", "post"): ToolCallsBody,
    ("/v1/sessions/{session_id}/signals", "post"): SignalsBody,
    ("/v1/sessions/{session_id}/deliveries/{delivery_id}/ack", "post"): AckBody,
}


class ToolsOut(BaseModel):
    """Function definitions for the session's active agent."""

    agent: str
    format: Literal["openai", "anthropic", "json-schema"]
    tools: list[dict[str, Any]]
    # Tools whose source cannot be reached right now (an MCP server), and why: a call to one
    # is refused at admission with reason `tool_unavailable`.
    unavailable: dict[str, str] = {}


class OperationOut(BaseModel):
    """An operation a call created or joined."""

    operation_id: str
    tool: str
    status: str
    batch_id: str | None


class ToolCallResultOut(BaseModel):
    """One call's answer: `output` goes to the model as the tool's result."""

    tool_call_id: str
    output: str
    operations: list[OperationOut]


class ToolCallsOut(BaseModel):
    """All calls of the request form one batch (null when nothing new was admitted)."""

    turn_id: str
    batch_id: str | None
    results: list[ToolCallResultOut]


class FactOut(BaseModel):
    """What one operation of a closing came to."""

    operation_id: str
    tool: str
    status: str
    summary: str


class PendingDeliveryOut(BaseModel):
    """An update waiting for the agent's next model call."""

    delivery_id: str
    text: str
    facts: list[FactOut]


class PendingOut(BaseModel):
    """Pending updates and the one text to prepend to the next model call."""

    deliveries: list[PendingDeliveryOut]
    context: str


class AckOut(BaseModel):
    """The acknowledgement is recorded; `delivery_status` is where the delivery stands now."""

    delivery_id: str
    status: AckStatus
    delivery_status: str


def pending_context(texts: list[str]) -> str:
    """Seed 003's pending-updates block: one text for the agent's next model call."""
    if not texts:
        return ""
    lines = [
        "Pending updates (results of earlier requests the user has not been told yet; "
        "tell them once, briefly, in your next reply):"
    ]
    lines.extend(f"- {text}" for text in texts)
    return "\n".join(lines)
