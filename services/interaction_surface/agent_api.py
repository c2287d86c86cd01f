"""The Agent API's routes (docs/contract.md §6b): tools, tool calls, signals, pending updates, acks,
and the agent's WebSocket. Same sessions, tokens and problem+json as the chat API (the shared
`api.py`); the channel's mechanics live in `agent_channel.py`, admission in `tool_calls.py`.

WebSocket frames in: `signal` and `delivery.ack` (as the HTTP bodies, plus `type`). Out:
`hello` once the connection is recorded, `delivery.say`, `delivery.acked` confirming each
ack, and `error` `{code, status, detail, delivery_id?, ack_status?}` for a frame refused
(the connection stays open; nothing of a refused frame is stored). Just over 400 lines:
every route of §6b is here, so the Agent API's surface reads as one file.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Literal

import msgspec
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.websockets import WebSocketDisconnect

from holdline.client.frames import (
    CLIENT_FRAME,
    AckedFrame,
    AckStatus,
    ErrorFrame,
    HeardText,
    HelloFrame,
    Ref,
    SignalFrame,
)
from libs.domain.delivery import WAITING_DECISIONS, DeliveryStatus
from libs.json_response import JSONResponse
from libs.problems import problem

from .agent_channel import AckRefused, AgentChannel, AgentConnection
from .api import ProblemError, Surface, deny, documented_problems, request_body
from .tool_calls import (
    FORMATS,
    BadCalls,
    StillAnswering,
    ToolCalls,
    ToolCallsBody,
    definitions,
    offered,
)

log = logging.getLogger(__name__)



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


class AgentApi:
    """What the Agent API's handlers share; the tool calls come with the surface's start."""

    def __init__(self, surface: Surface, channel: AgentChannel) -> None:
        self.surface = surface
        self.channel = channel

    def _calls(self) -> ToolCalls:
        started = self.surface.started
        if started is None:
            raise ProblemError(503, "Service unavailable", "starting", slug="unavailable")
        return started.tool_calls

    async def ack(
        self, session_id: str, delivery_id: str, status: AckStatus, *,
        heard_text: str | None, turn_id: str | None, connection_id: str | None = None,
    ) -> dict[str, Any]:
        """Record an acknowledgement (HTTP or WebSocket)."""
        if heard_text is not None and status != "unheard":
            raise AckRefused(422, "invalid_ack", "heard_text goes with status unheard only")
        delivery_status = await self.channel.ack(
            session_id, delivery_id, status, heard_text=heard_text, turn_id=turn_id,
            connection_id=connection_id,
        )
        return {"delivery_id": delivery_id, "status": status, "delivery_status": delivery_status}

    def pending(self, session_id: str) -> dict[str, Any]:
        """Finals that found no proactive window, for the agent's next model call."""
        found = [
            d for d in self.surface.view.session_deliveries(session_id)
            if d.kind == "final"
            and d.status is DeliveryStatus.WAITING
            and d.decision in WAITING_DECISIONS
        ]
        return {
            "deliveries": [
                {
                    "delivery_id": d.delivery_id,
                    "text": d.text,
                    "facts": msgspec.to_builtins(self.channel.facts(d)),
                }
                for d in found
            ],
            "context": pending_context([d.text for d in found]),
        }


def add_agent_routes(router: APIRouter, api: AgentApi) -> None:
    """Every route of the Agent API."""
    surface = api.surface
    settings = surface.settings

    @router.get(
        "/v1/sessions/{session_id}/tools",
        response_model=ToolsOut,
        responses=documented_problems(401, 404, 422),
    )
    async def tools(session_id: str, request: Request, format: str = "openai") -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        if format not in FORMATS:
            raise ProblemError(
                422, "Invalid request", f"format must be one of {', '.join(FORMATS)}"
            )
        registry = api._calls().registry
        return JSONResponse(
            {
                "agent": state.agent,
                "format": format,
                "tools": definitions(offered(registry, state.agent), format),
            }
        )

    @router.post(
        "/v1/sessions/{session_id}/tool-calls",
        response_model=ToolCallsOut,
        responses=documented_problems(400, 401, 404, 409, 413, 422, 429),
    )
    async def tool_calls(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = await request_body(request, ToolCallsBody, settings.max_body_bytes)
        if state.closed:
            raise ProblemError(409, "Conflict", "the session is closed", slug="session-closed")
        surface.limit(state)
        try:
            answer = await api._calls().handle(state, body)
        except BadCalls as exc:
            raise ProblemError(
                422, "Invalid tool calls", str(exc), slug="invalid-tool-calls"
            ) from None
        except StillAnswering:
            raise ProblemError(
                409, "Conflict", "a tool_call_id of this request is still being answered; retry"
            ) from None
        return JSONResponse(answer)

    _write_routes(router, api)
    _ws_route(router, api)


def _write_routes(router: APIRouter, api: AgentApi) -> None:
    surface = api.surface
    settings = surface.settings

    @router.post(
        "/v1/sessions/{session_id}/signals",
        status_code=204,
        responses=documented_problems(400, 401, 404, 413, 422, 429),
    )
    async def signals(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = await request_body(request, SignalsBody, settings.max_body_bytes)
        if body.user_speaking is None and body.agent_speaking is None:
            raise ProblemError(
                422, "Invalid request", "give user_speaking, agent_speaking or both"
            )
        surface.limit(state)
        await api.channel.signal(session_id, body.user_speaking, body.agent_speaking)
        return Response(status_code=204)

    @router.get(
        "/v1/sessions/{session_id}/pending",
        response_model=PendingOut,
        responses=documented_problems(401, 404),
    )
    async def pending(session_id: str, request: Request) -> Response:
        await surface.session(session_id, request.headers.get("authorization"))
        await surface.view.sync()
        return JSONResponse(api.pending(session_id))

    @router.post(
        "/v1/sessions/{session_id}/deliveries/{delivery_id}/ack",
        response_model=AckOut,
        responses=documented_problems(400, 401, 404, 409, 413, 422),
    )
    async def ack(session_id: str, delivery_id: str, request: Request) -> Response:
        await surface.session(session_id, request.headers.get("authorization"))
        body = await request_body(request, AckBody, settings.max_body_bytes)
        if surface.view.deliveries.get(delivery_id) is None:
            await surface.view.sync()
        try:
            answer = await api.ack(
                session_id, delivery_id, body.status, heard_text=body.heard_text,
                turn_id=body.turn_id,
            )
        except AckRefused as exc:
            raise ProblemError(exc.status, _TITLES.get(exc.status, "Refused"), exc.detail,
                               slug=exc.code.replace("_", "-")) from None
        return JSONResponse(answer)


def _ws_route(router: APIRouter, api: AgentApi) -> None:
    surface = api.surface

    @router.websocket("/v1/sessions/{session_id}/agent")
    async def agent(websocket: WebSocket, session_id: str) -> None:
        try:
            state = await surface.session_for_token(session_id, websocket.query_params.get("token"))
            after = _after(websocket.query_params.get("after"))
        except ProblemError as exc:
            await deny(websocket, exc.response())
            return
        except ValueError as exc:
            await deny(websocket, problem(400, "Bad request", str(exc)))
            return
        if state.closed:
            await deny(websocket, problem(409, "Conflict", "the session is closed"))
            return
        await websocket.accept()
        conn = AgentConnection(session_id, api.surface.ids.new("agent"), websocket, after)
        try:
            await api.channel.connect(conn)
            await conn.send(
                HelloFrame(session_id=session_id, connection_id=conn.connection_id, after=after)
            )
            await _serve(api, conn)
        finally:
            # Recorded even when the handler is cancelled (shutdown): nothing stays `sent`.
            await asyncio.shield(api.channel.disconnect(conn))


_TITLES = {404: "Not found", 409: "Conflict", 422: "Invalid request"}


def _after(raw: str | None) -> int:
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or len(raw) > 19:
        raise ValueError("after must be a non-negative integer (the last seq seen)")
    return int(raw)


async def _serve(api: AgentApi, conn: AgentConnection) -> None:
    """Read frames until the agent leaves; refuse bad ones with an error frame."""
    websocket = conn.websocket
    while not conn.closed:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            await _error(conn, 400, "binary_frame", "frames are JSON text")
            continue
        await _frame(api, conn, text)


async def _frame(api: AgentApi, conn: AgentConnection, text: str) -> None:
    if len(text) > api.surface.settings.max_body_bytes:
        await _error(conn, 413, "frame_too_large", "the frame exceeds the body limit")
        return
    try:
        frame = CLIENT_FRAME.decode(text)
    except msgspec.ValidationError as exc:
        await _error(conn, 422, "invalid_frame", str(exc), **_ids(text))
        return
    except msgspec.DecodeError as exc:
        await _error(conn, 400, "malformed_json", str(exc))
        return
    if isinstance(frame, SignalFrame):
        if frame.user_speaking is None and frame.agent_speaking is None:
            await _error(conn, 422, "invalid_frame", "give user_speaking, agent_speaking or both")
            return
        await api.channel.signal(conn.session_id, frame.user_speaking, frame.agent_speaking)
        return
    view = api.surface.view
    if view.deliveries.get(frame.delivery_id) is None:
        await view.sync()
    try:
        answer = await api.ack(
            conn.session_id, frame.delivery_id, frame.status, heard_text=frame.heard_text,
            turn_id=frame.turn_id, connection_id=conn.connection_id,
        )
    except AckRefused as exc:
        await _error(conn, exc.status, exc.code, exc.detail, delivery_id=frame.delivery_id,
                     ack_status=frame.status)
        return
    await conn.send(AckedFrame(**answer))


def _ids(text: str) -> dict[str, Any]:
    """The delivery and ack status of a refused ack frame, so the client can match it."""
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(raw, dict) or raw.get("type") != "delivery.ack":
        return {}
    ids = {k: raw[k] for k in ("delivery_id",) if isinstance(raw.get(k), str)}
    if isinstance(raw.get("status"), str):
        ids["ack_status"] = raw["status"]
    return ids


async def _error(conn: AgentConnection, status: int, code: str, detail: str, **ids: Any) -> None:
    await conn.send(ErrorFrame(code=code, status=status, detail=detail, **ids))
