"""The Agent API's HTTP routes (docs/contract.md §6b): tools, tool calls, signals, pending
updates and acks. Same sessions, tokens and problem+json as the chat API (`core/`); the
bodies are in `bodies.py`, the WebSocket in `socket.py`, the channel's mechanics in
`channel.py` and `acks.py`, admission in `tool_calls.py`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import msgspec
from fastapi import APIRouter, Request
from fastapi.responses import Response

from holdline.client.frames import AckStatus
from libs.domain.delivery import WAITING_DECISIONS, DeliveryStatus
from libs.json_response import JSONResponse

from ..core.http import ProblemError, documented_problems, request_body
from ..core.surface import Surface
from ..delivery.executor import DeliveryExecutor
from ..mcp.tasks import task_result
from .acks import AckRefused, AgentAcks
from .bodies import (
    AckBody,
    AckOut,
    PendingOut,
    SignalsBody,
    ToolCallsOut,
    ToolsOut,
    pending_context,
)
from .channel import AgentChannel
from .records import AgentRecords
from .tool_calls import ToolCalls
from .tool_formats import (
    FORMATS,
    BadCalls,
    StillAnswering,
    ToolCallsBody,
    definitions,
    offered,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, eq=False)
class AgentApi:
    """What the Agent API's handlers share; the tool calls come with the surface's start."""

    surface: Surface
    channel: AgentChannel
    acks: AgentAcks
    records: AgentRecords
    # Watches each open socket's session (several surfaces: whoever consumed a closing).
    executor: DeliveryExecutor

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
        delivery_status = await self.acks.ack(
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
            and not task_result(d.turn_id)  # an MCP task's result is its tasks/get's
        ]
        return {
            "deliveries": [
                {
                    "delivery_id": d.delivery_id,
                    "text": d.text,
                    "facts": msgspec.to_builtins(self.records.facts(d)),
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
        tools = offered(registry, state.agent)
        down = {t.name: reason for t in tools if (reason := registry.unavailable(t.name))}
        return JSONResponse(
            {
                "agent": state.agent,
                "format": format,
                "tools": definitions(tools, format),
                "unavailable": down,
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
        await api.acks.signal(session_id, body.user_speaking, body.agent_speaking)
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
        responses=documented_problems(400, 401, 404, 409, 413, 422, 429),
    )
    async def ack(session_id: str, delivery_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = await request_body(request, AckBody, settings.max_body_bytes)
        # An ack appends, as its WebSocket frame does: it takes a write's tokens.
        surface.limit(state)
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


_TITLES = {404: "Not found", 409: "Conflict", 422: "Invalid request"}
