"""The chat API of docs/contract.md §6: sessions, turns, snapshot, timeline, stream, activity,
handoff.

Bodies are read with a byte limit (a larger body is drained and answered 413, so the client
always gets its answer) and decoded with msgspec into strict types: malformed JSON or
invalid UTF-8 → 400, wrong types or missing fields → 422, all as problem+json. A session
call without a bearer token is 401; a token that is not this session's is 404, exactly as
for a session that does not exist. A token older than `HOLDLINE_TOKEN_TTL_S` is 401
(`token-expired`); writes beyond the session's or tenant's rate are 429 with `Retry-After`,
refused before anything is appended. `DELETE /v1/sessions/{id}` closes and erases a session:
afterwards it answers 404 like any session that does not exist.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

import httpx
import msgspec
from fastapi import APIRouter, FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from libs import metrics
from libs.bus import ConcurrencyConflict, Context, InvalidSubjectToken, append, token
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.domain import SessionState
from libs.events import (
    INTERACTION,
    AgentHandedOff,
    Envelope,
    InteractionEvent,
    SessionClosed,
    SessionOpened,
    UserActivity,
)
from libs.problems import PROBLEM_JSON, problem
from libs.service import Runtime

from .auth import api_key_ok, bearer, hash_token, new_token, token_matches
from .chat.turns import TurnBusy, TurnInput, TurnPending, Turns
from .diagnosis import diagnose
from .projections import ERASED, SurfaceView, decode_cursor
from .ratelimit import RateLimited, RateLimiter
from .settings import Settings
from .snapshot import build_snapshot, causal_order, timeline_item
from .stream import SessionStream

if TYPE_CHECKING:
    from libs.admission import Admission

    from .tool_calls import ToolCalls

log = logging.getLogger(__name__)

Id = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
# Part of a KV key: dots only between characters (a leading, trailing or double dot is
# an invalid key, which would fail the turn after validation instead of before it).
ClientTurnId = Annotated[
    str, msgspec.Meta(pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$", max_length=64)
]
# Drained beyond the limit so the client reads its 413; past this we stop reading.
_DRAIN_LIMIT = 64 * 1024 * 1024


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

B = TypeVar("B")


class ProblemError(Exception):
    """Raised inside a handler; answered as problem+json."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str = "",
        *,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail or title)
        self.status = status
        self.title = title
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra

    def response(self) -> JSONResponse:
        """The problem+json answer."""
        answer = problem(self.status, self.title, self.detail, **self.extra)
        answer.headers.update(self.headers)
        return answer


def _not_found() -> ProblemError:
    return ProblemError(404, "Not found", "no such session")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or 413 once it exceeds `limit` (the rest is drained, not kept)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > _DRAIN_LIMIT:
        raise ProblemError(413, "Payload too large", f"the body exceeds {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit:
            chunks.append(chunk)
        elif size > _DRAIN_LIMIT:
            break
    if size > limit:
        raise ProblemError(413, "Payload too large", f"the body exceeds {limit} bytes")
    return b"".join(chunks)


def decode_body(raw: bytes, kind: type[B]) -> B:
    """Strict JSON decoding with the right status for each kind of mistake."""
    if not raw.strip():
        raise ProblemError(400, "Bad request", "the request body is empty")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise ProblemError(422, "Invalid request", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ProblemError(400, "Bad request", f"malformed JSON: {exc}") from None


class ProblemOut(BaseModel):
    """RFC 9457 problem details, as every error of this API is answered."""

    type: str
    title: str
    status: int
    detail: str = ""


class ErasedOut(BaseModel):
    """`DELETE /v1/sessions/{id}`: the session is closed and its texts erased."""

    session_id: str
    status: Literal["erased"]
    pending_operations: list[str]


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    # Documented so OpenAPI clients (and the hostile-input suite) know every error shape.
    content = {PROBLEM_JSON: {"schema": ProblemOut.model_json_schema()}}
    return {code: {"model": ProblemOut, "content": content} for code in statuses}


@dataclass(frozen=True)
class Started:
    """The parts that need the broker connection, built together by the start-up builder
    (`app.start_parts`) and handed to the surface in one step."""

    admission: Admission
    turns: Turns
    tool_calls: ToolCalls
    http: httpx.AsyncClient


@dataclass
class Surface:
    """What the handlers share; `started` is given once, when the broker is connected."""

    runtime: Runtime
    view: SurfaceView
    settings: Settings
    # The process's one clock and id factory (libs/clock.py), from the composition root.
    clock: Clock = SYSTEM_CLOCK
    ids: Ids = RANDOM_IDS
    started: Started | None = None
    limiter: RateLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(self.settings.rate_session, self.settings.rate_tenant)

    @property
    def turns(self) -> Turns | None:
        """The chat turns, once started."""
        return self.started.turns if self.started is not None else None

    @property
    def http(self) -> httpx.AsyncClient | None:
        """The client to the provider, once started."""
        return self.started.http if self.started is not None else None

    def limit(self, state: SessionState) -> None:
        """Take this write's tokens, or answer 429 having written nothing."""
        try:
            self.limiter.admit(state.session_id, state.tenant_id)
        except RateLimited as exc:
            log.info("%s rate limit refused a write of session %s", exc.scope, state.session_id)
            raise ProblemError(
                429,
                "Too many requests",
                f"the {exc.scope} rate limit is exceeded; retry after {exc.retry_after} s",
                headers={"Retry-After": str(exc.retry_after)},
                slug="rate-limited",
                scope=exc.scope,
            ) from None

    async def session(self, session_id: str, authorization: str | None) -> SessionState:
        """The session if the bearer token is its own; 401 without one, 404 otherwise."""
        presented = bearer(authorization)
        if presented is None:
            raise ProblemError(
                401, "Unauthorized", "a bearer token is required", slug="unauthorized"
            )
        return await self.session_for_token(session_id, presented)

    async def session_for_token(self, session_id: str, presented: str | None) -> SessionState:
        """The session if the token is its own, else 404 (never a hint which was wrong)."""
        try:
            token(session_id)
        except InvalidSubjectToken:
            raise _not_found() from None
        state = self.view.session(session_id)
        if state is None:
            # Opened through another process a moment ago: catch up once.
            await self.view.sync()
            state = self.view.session(session_id)
        if not token_matches(state, presented) or state is None:
            raise _not_found()
        self._check_expiry(session_id)
        return state

    def _check_expiry(self, session_id: str) -> None:
        # Only the holder of the right token learns that it expired; others get the 404.
        ttl = self.settings.token_ttl_s
        found = self.view.log(session_id)
        if ttl <= 0 or found is None or found.opened_at is None:
            return
        if (self.clock.now() - found.opened_at).total_seconds() > ttl:
            raise ProblemError(
                401,
                "Unauthorized",
                "the session token expired; open a new session",
                slug="token-expired",
            )

    async def append_interaction(
        self, session_id: str, event: InteractionEvent, *, expect: bool, **ids: Any
    ) -> Envelope[InteractionEvent]:
        """Append to the session subject (with its expected sequence when `expect`)."""
        subject = self.runtime.topology.session_subject(session_id)
        for _ in range(20):
            found = self.view.log(session_id)
            seq = found.session_seq if found is not None else 0
            env: Envelope[InteractionEvent] = Envelope(
                event_id=self.ids.new("ev"),
                occurred_at=self.clock.now(),
                session_id=session_id,
                event=event,
                **ids,
            )
            try:
                ack = await append(
                    self.runtime.jetstream,
                    INTERACTION,
                    subject,
                    env,
                    expected_last_subject_seq=seq if expect else None,
                    timings=self.runtime.timings,
                )
            except ConcurrencyConflict:
                await self.view.sync()
                continue
            metrics.EVENTS_PUBLISHED.labels(stream="interaction").inc()
            await self.view.wait_applied(Context.INTERACTION, ack.seq)
            return env
        raise ProblemError(409, "Conflict", "the session is changing too fast; retry")


def build_router(surface: Surface) -> APIRouter:
    """Every route of the chat API."""
    router = APIRouter()
    _write_routes(router, surface)
    _read_routes(router, surface)
    return router


def _write_routes(router: APIRouter, surface: Surface) -> None:
    settings = surface.settings

    @router.post("/v1/sessions", status_code=201)
    async def create_session(request: Request) -> Response:
        body = decode_body(await read_body(request, settings.max_body_bytes), CreateSessionBody)
        tenant = body.tenant_id or settings.default_tenant
        if not api_key_ok(settings.tenant_api_keys, tenant, request.headers.get("x-api-key")):
            raise ProblemError(
                401, "Unauthorized", "a valid X-Api-Key for the tenant is required",
                slug="unauthorized",
            )
        session_id = surface.ids.new("s")
        issued = new_token()
        agent = body.agent or settings.default_agent
        await surface.append_interaction(
            session_id,
            SessionOpened(
                user_id=body.user_id, tenant_id=tenant, agent=agent, token_hash=hash_token(issued)
            ),
            expect=True,
            agent=agent,
        )
        return JSONResponse(
            {"session_id": session_id, "token": issued, "agent": agent}, status_code=201
        )

    @router.post(
        "/v1/sessions/{session_id}/turns",
        responses=_problems(400, 401, 404, 409, 413, 422, 429),
    )
    async def turn(session_id: str, request: Request) -> Response:
        with metrics.turn_phase("route"):
            return await _turn(session_id, request)

    async def _turn(session_id: str, request: Request) -> Response:
        with metrics.turn_phase("auth"):
            state = await surface.session(session_id, request.headers.get("authorization"))
        with metrics.turn_phase("parse"):
            body = decode_body(await read_body(request, settings.max_body_bytes), TurnBody)
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
        try:
            answer = await surface.turns.handle(
                TurnInput(session=state, text=text, client_turn_id=body.client_turn_id)
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
            return JSONResponse(answer)

    @router.delete(
        "/v1/sessions/{session_id}",
        response_model=ErasedOut,
        responses=_problems(401, 404, 409),
    )
    async def erase(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        pending = await erase_session(surface, state)
        return JSONResponse(
            {"session_id": session_id, "status": "erased", "pending_operations": pending}
        )


def _read_routes(router: APIRouter, surface: Surface) -> None:
    settings = surface.settings

    @router.get("/v1/sessions/{session_id}", responses=_problems(401, 404))
    async def snapshot(session_id: str, request: Request) -> Response:
        await surface.session(session_id, request.headers.get("authorization"))
        await surface.view.sync()
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

    @router.get("/v1/sessions/{session_id}/timeline", responses=_problems(401, 404))
    async def timeline(session_id: str, request: Request) -> Response:
        await surface.session(session_id, request.headers.get("authorization"))
        await surface.view.sync()
        found = surface.view.log(session_id)
        entries = found.entries if found is not None else []
        items = [timeline_item(e) for e in causal_order(entries)]
        return JSONResponse(
            {"session_id": session_id, "events": items, "diagnosis": diagnose(items)}
        )

    @router.post(
        "/v1/sessions/{session_id}/activity",
        status_code=202,
        responses=_problems(400, 401, 404, 413, 422, 429),
    )
    async def activity(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = decode_body(await read_body(request, settings.max_body_bytes), ActivityBody)
        surface.limit(state)
        await surface.append_interaction(
            session_id, UserActivity(typing=body.typing), expect=False, agent=state.agent
        )
        return JSONResponse({"typing": body.typing}, status_code=202)

    @router.post(
        "/v1/sessions/{session_id}/handoff",
        responses=_problems(400, 401, 404, 409, 413, 422, 429),
    )
    async def handoff(session_id: str, request: Request) -> Response:
        state = await surface.session(session_id, request.headers.get("authorization"))
        body = decode_body(await read_body(request, settings.max_body_bytes), HandoffBody)
        surface.limit(state)
        context = body.context or settings.handoff_context
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
        try:
            await surface.session_for_token(session_id, websocket.query_params.get("token"))
            after = decode_cursor(websocket.query_params.get("after"))
        except ProblemError as exc:
            await _deny(websocket, exc.response())
            return
        except ValueError as exc:
            await _deny(websocket, problem(400, "Bad request", str(exc)))
            return
        await websocket.accept()
        await SessionStream(surface.view, websocket, session_id).run(after)


async def erase_session(surface: Surface, state: SessionState) -> list[str]:
    """Close the session, then purge its interaction events (texts included) from the stream.

    Operations keep running to their business outcome; the policy suppresses what would have
    been said. Returns the operations still pending.
    """
    session_id = state.session_id
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
    # Everything of the subject but its last message (the close) is deleted for good.
    topology = surface.runtime.topology
    await surface.runtime.jetstream.purge_stream(
        topology.stream_name(Context.INTERACTION),
        subject=topology.session_subject(session_id),
        keep=1,
    )
    log.info("session %s erased; %d operations still pending", session_id, len(pending))
    return pending


async def _deny(websocket: WebSocket, response: Response) -> None:
    # The HTTP answer itself (404 problem+json) where the server supports it, else a close.
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=4000 + response.status_code)


def build_demo_router(surface: Surface) -> APIRouter:
    """`/v1/demo/faults`: the demo page's door to the sandbox provider's fault injection."""
    router = APIRouter()

    async def forward(method: str, body: bytes | None = None, path: str = "") -> Response:
        assert surface.http is not None
        try:
            answer = await surface.http.request(
                method,
                f"/admin/faults{path}",
                content=body,
                headers={"content-type": "application/json"} if body is not None else None,
            )
        except httpx.HTTPError as exc:
            raise ProblemError(
                502, "Bad gateway", f"the sandbox provider did not answer: {exc}",
                slug="bad-gateway",
            ) from None
        return Response(
            answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type", "application/json"),
        )

    @router.get("/v1/demo/faults")
    async def list_faults() -> Response:
        return await forward("GET")

    @router.post("/v1/demo/faults")
    async def add_fault(request: Request) -> Response:
        raw = await read_body(request, surface.settings.max_body_bytes)
        decode_body(raw, dict[str, Any])
        return await forward("POST", raw)

    @router.delete("/v1/demo/faults")
    async def clear_faults() -> Response:
        return await forward("DELETE")

    @router.delete("/v1/demo/faults/{fault_id}")
    async def remove_fault(fault_id: str) -> Response:
        try:
            token(fault_id)
        except InvalidSubjectToken:
            raise ProblemError(404, "Not found", "no such fault") from None
        return await forward("DELETE", path=f"/{fault_id}")

    return router


_TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s\"']+")


class RedactTokens(logging.Filter):
    """Hides `?token=` values: uvicorn logs every WebSocket's path with its query string."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Rewrite the record's message without the token; never drop the record."""
        message = record.getMessage()
        if "token=" in message:
            record.msg = _TOKEN_IN_QUERY.sub(r"\1<redacted>", message)
            record.args = None
        return True


def install(app: FastAPI, surface: Surface) -> None:
    """Routes plus the problem answer for ProblemError."""
    for name in ("uvicorn.error", "uvicorn.access", "uvicorn"):
        logging.getLogger(name).addFilter(RedactTokens())

    @app.exception_handler(ProblemError)
    async def on_problem(_request: Request, exc: ProblemError) -> Response:
        return exc.response()

    app.include_router(build_router(surface))
    if surface.settings.demo:
        app.include_router(build_demo_router(surface))
