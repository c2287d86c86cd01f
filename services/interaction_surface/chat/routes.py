"""The chat routes of docs/contract.md §6: sessions, turns, snapshot, timeline, stream,
activity, handoff.

`POST /v1/sessions` needs a tenant credential off loopback (identity.py) and an agent the
tenant may use (libs/tools/agents.py, as does a handoff); every other
route is a session's (bearer token; the stream's WebSocket: core/sockets.py) and is checked by the
shared `Surface` (`core/surface.py`, `core/http.py`): body limits, strict decoding, tokens,
expiry and rate limits are the same for chat, voice and the Agent API.
`DELETE /v1/sessions/{id}` closes and erases a session: afterwards it answers 404 like any
session that does not exist.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Annotated, Any, Literal

import msgspec
from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.background import BackgroundTask

from libs import metrics
from libs.domain import SessionState
from libs.events import AgentHandedOff, SessionClosed, SessionOpened, UserActivity
from libs.json_response import JSONResponse
from libs.models.template import NO_MODEL_HINT

from ..auth import hash_token, new_token
from ..core.diagnosis import diagnose
from ..core.http import ProblemError, documented_problems, request_body
from ..core.session_log import ERASED, decode_cursor
from ..core.snapshot import build_snapshot, causal_order, timeline_item
from ..core.sockets import SocketAuth, add_ticket_route
from ..core.surface import Surface
from .stream import SessionStream
from .turn_log import TurnBusy, TurnPending
from .turns import TurnInput

log = logging.getLogger(__name__)

Id = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
# Part of a KV key: dots only between characters (a leading, trailing or double dot is
# an invalid key, which would fail the turn after validation instead of before it).
ClientTurnId = Annotated[
    str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$", max_length=64)
]


class CreateSessionBody(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/sessions`."""

    user_id: Id
    tenant_id: Id | None = None
    agent: Id | None = None


class TurnBody(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/sessions/{id}/turns`."""

    text: str
    client_turn_id: ClientTurnId | None = None


class ActivityBody(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/sessions/{id}/activity`."""

    typing: bool


class HandoffBody(msgspec.Struct, frozen=True, kw_only=True):
    """`POST /v1/sessions/{id}/handoff`; `context` overrides the configured default."""

    agent: Id
    context: Literal["fresh", "carried"] | None = None


# The bodies each route decodes itself, published in the OpenAPI document (libs.openapi).
BODIES: dict[tuple[str, str], type[Any]] = {
    ("/v1/sessions", "post"): CreateSessionBody,
    ("/v1/sessions/{session_id}/turns", "post"): TurnBody,
    ("/v1/sessions/{session_id}/activity", "post"): ActivityBody,
    ("/v1/sessions/{session_id}/handoff", "post"): HandoffBody,
}


class ErasedOut(BaseModel):
    """`DELETE /v1/sessions/{id}`: the session is closed and its texts erased."""

    session_id: str
    status: Literal["erased"]
    pending_operations: list[str]


def add_chat_routes(router: APIRouter, surface: Surface, sockets: SocketAuth) -> None:
    """Every route of the chat API, over the shared surface (its turns once started)."""
    _write_routes(router, surface)
    _read_routes(router, surface, sockets)
    add_ticket_route(router, sockets)


def _write_routes(router: APIRouter, surface: Surface) -> None:
    settings = surface.settings

    @router.post(
        "/v1/sessions", status_code=201,
        responses=documented_problems(400, 401, 403, 404, 413, 422, 429),
    )
    async def create_session(request: Request) -> Response:
        peer = request.client.host if request.client else None
        surface.limit_address(peer, request.headers)
        body = await request_body(request, CreateSessionBody, settings.max_body_bytes)
        who = surface.identify(peer, request.headers, body.user_id, body.tenant_id)
        tenant = who.tenant_id
        agent = body.agent or settings.default_agent
        surface.check_agent(tenant, agent)
        surface.limit_open(tenant)
        session_id = surface.ids.new("s")
        issued = new_token()
        await surface.append_interaction(
            session_id,
            SessionOpened(
                user_id=who.user_id, tenant_id=tenant, agent=agent, token_hash=hash_token(issued)
            ),
            expect=True,
            agent=agent,
        )
        return JSONResponse(
            {"session_id": session_id, "token": issued, "agent": agent}, status_code=201
        )

    @router.post(
        "/v1/sessions/{session_id}/turns",
        responses=documented_problems(400, 401, 404, 409, 413, 422, 429, 503),
    )
    async def turn(session_id: str, request: Request) -> Response:
        with metrics.turn_phase("route"):
            return await _turn(session_id, request)

    async def _turn(session_id: str, request: Request) -> Response:
        with metrics.turn_phase("auth"):
            state = await surface.session(session_id, request.headers.get("authorization"))
        with metrics.turn_phase("parse"):
            body = await request_body(request, TurnBody, settings.max_body_bytes)
        text = body.text.strip()
        if not text:
            raise ProblemError(422, "Invalid request", "text must not be empty")
        if len(text) > settings.max_text_chars:
            raise ProblemError(
                422, "Invalid request", f"text is longer than {settings.max_text_chars} characters"
            )
        if state.closed:
            raise ProblemError(409, "Conflict", "the session is closed", slug="session-closed")
        surface.limit(state)
        assert surface.turns is not None
        if not surface.turns.has_model:
            raise ProblemError(503, "No model configured", NO_MODEL_HINT, slug="no-model")
        sent = asyncio.Event()
        try:
            answer = await surface.turns.handle(
                TurnInput(
                    session=state, text=text, client_turn_id=body.client_turn_id, sent=sent
                )
            )
        except TurnBusy:
            raise ProblemError(
                409, "Conflict", "another turn of this session is still being answered"
            ) from None
        except TurnPending:
            raise ProblemError(
                409, "Conflict", "this client_turn_id is still being answered; retry"
            ) from None
        with metrics.turn_phase("respond"):
            # The turn's record is written once this response is out (Turns.handle).
            return JSONResponse(answer, background=BackgroundTask(_mark_sent, sent))

    @router.delete(
        "/v1/sessions/{session_id}",
        response_model=ErasedOut,
        responses=documented_problems(401, 404, 409),
    )
    async def erase(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        pending = await erase_session(surface, state)
        return JSONResponse(
            {"session_id": session_id, "status": "erased", "pending_operations": pending}
        )


async def _mark_sent(sent: asyncio.Event) -> None:
    """A coroutine, so Starlette runs it on the loop: a plain callable would be sent to its
    thread pool, one thread hand-off per turn, and `asyncio.Event.set` is not thread-safe
    (a waiter woken from another thread waits for the loop's next wake-up)."""
    sent.set()


async def _caught_up(surface: Surface, session_id: str) -> None:
    """The view as of every answer already given for the session: its chat turn's record
    (written behind the answer) in the log, and every stream read to its end."""
    if surface.turns is not None:
        await surface.turns.recorded(session_id)
    await surface.view.sync()


def _read_routes(router: APIRouter, surface: Surface, sockets: SocketAuth) -> None:
    settings = surface.settings

    @router.get("/v1/sessions/{session_id}", responses=documented_problems(401, 404))
    async def snapshot(session_id: str, request: Request) -> Response:
        await surface.session(session_id, request.headers.get("authorization"))
        await _caught_up(surface, session_id)
        state = surface.view.session(session_id)
        found = surface.view.log(session_id)
        assert state is not None
        assert found is not None
        view = surface.view
        return JSONResponse(
            build_snapshot(
                state,
                view.session_operations(session_id),
                view.session_batches(session_id),
                view.session_deliveries(session_id),
                found.cursor,
                label=view.label,
            )
        )

    @router.get("/v1/sessions/{session_id}/timeline", responses=documented_problems(401, 404))
    async def timeline(session_id: str, request: Request) -> Response:
        await surface.session(session_id, request.headers.get("authorization"))
        await _caught_up(surface, session_id)
        found = surface.view.log(session_id)
        entries = found.entries if found is not None else []
        items = [timeline_item(e) for e in causal_order(entries)]
        return JSONResponse(
            {"session_id": session_id, "events": items, "diagnosis": diagnose(items)}
        )

    @router.post(
        "/v1/sessions/{session_id}/activity",
        status_code=202,
        responses=documented_problems(400, 401, 404, 413, 422, 429),
    )
    async def activity(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = await request_body(request, ActivityBody, settings.max_body_bytes)
        surface.limit(state)
        await surface.append_interaction(
            session_id, UserActivity(typing=body.typing), expect=False, agent=state.agent
        )
        return JSONResponse({"typing": body.typing}, status_code=202)

    @router.post(
        "/v1/sessions/{session_id}/handoff",
        responses=documented_problems(400, 401, 403, 404, 409, 413, 422, 429),
    )
    async def handoff(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = await request_body(request, HandoffBody, settings.max_body_bytes)
        if body.agent != state.agent:
            surface.check_agent(state.tenant_id, body.agent, from_agent=state.agent)
        surface.limit(state)
        context = body.context or settings.handoff_context
        # What the answers so far admitted is pending, and the handoff follows their replies.
        await _caught_up(surface, session_id)
        pending = [
            o.operation_id for o in surface.view.session_operations(session_id) if not o.terminal
        ]
        if body.agent != state.agent:
            await surface.append_interaction(
                session_id,
                AgentHandedOff(from_agent=state.agent, to_agent=body.agent, context=context),
                expect=True,
                agent=body.agent,
            )
            if pending:
                metrics.HANDOFFS_WITH_PENDING.inc()
        return JSONResponse(
            {
                "session_id": session_id,
                "agent": body.agent,
                "from_agent": state.agent,
                "context": context,
                "pending_operations": pending,
            }
        )

    @router.websocket("/v1/sessions/{session_id}/stream")
    async def stream(websocket: WebSocket, session_id: str) -> None:
        admitted = await sockets.admit(websocket, session_id, decode_cursor)
        if admitted is None:
            return
        _state, after = admitted
        await websocket.accept()
        async with sockets.until_expiry(websocket, session_id):
            await SessionStream(surface.view, websocket, session_id).run(after)


async def erase_session(surface: Surface, state: SessionState) -> list[str]:
    """Close the session, then purge its words from the broker (core/erasure.py).

    Operations keep running to their business outcome; the policy suppresses what would have
    been said, and their events are purged once settled. Returns the operations still pending.
    """
    session_id = state.session_id
    await _caught_up(surface, session_id)
    pending = [
        o.operation_id for o in surface.view.session_operations(session_id) if not o.terminal
    ]
    await surface.append_interaction(
        session_id, SessionClosed(reason=ERASED), expect=True, agent=state.agent
    )
    found = surface.view.log(session_id)
    assert found is not None
    closed_seq = found.session_seq
    # A turn being answered still writes its reply: wait for it (bounded) so the purge
    # takes that text too.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + surface.settings.turn_wait_s
    while found.open_turn is not None and loop.time() < deadline:
        await surface.view.wait_session_change(session_id, deadline - loop.time())
    if found.session_seq != closed_seq:
        # Something landed after the close: end the subject with the marker again.
        await surface.append_interaction(
            session_id, SessionClosed(reason=ERASED), expect=False, agent=state.agent
        )
    # Its words leave every stream and bucket (core/erasure.py): the interaction subject
    # but its last message (the close), control, dead letters and stored answers now, its
    # business events once settled.
    await surface.eraser.purge_now(session_id)
    log.info("session %s erased; %d operations still pending", session_id, len(pending))
    return pending
