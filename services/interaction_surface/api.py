"""What chat, voice and the Agent API share: the `Surface` (sessions, tokens, rate limits,
appends to a session's subject), problem+json answers and strict bodies.

Bodies are read with a byte limit (a larger body is drained and answered 413, so the client
always gets its answer) and decoded with msgspec into strict types: malformed JSON or
invalid UTF-8 → 400, wrong types or missing fields → 422, all as problem+json. A session
call without a bearer token is 401; a token that is not this session's is 404, exactly as
for a session that does not exist. A token older than `HOLDLINE_TOKEN_TTL_S` is 401
(`token-expired`); writes beyond the session's or tenant's rate are 429 with `Retry-After`,
refused before anything is appended. The routes are the channels': `chat/routes.py`,
`agent_api.py`, `voice/twilio.py`; the demo's fault proxy is here (it is no channel's).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import msgspec
from fastapi import APIRouter, FastAPI, Request, WebSocket
from fastapi.responses import Response
from pydantic import BaseModel

from libs import metrics
from libs.bus import ConcurrencyConflict, Context, InvalidSubjectToken, append, token
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.domain import SessionState
from libs.events import INTERACTION, Envelope, InteractionEvent
from libs.json_response import JSONResponse
from libs.problems import PROBLEM_JSON, problem
from libs.service import Runtime

from .auth import bearer, token_matches
from .projections import SurfaceView
from .ratelimit import RateLimited, RateLimiter
from .settings import Settings

if TYPE_CHECKING:
    from libs.admission import Admission

    from .chat.turns import Turns
    from .tool_calls import ToolCalls

log = logging.getLogger(__name__)

# Drained beyond the limit so the client reads its 413; past this we stop reading.
_DRAIN_LIMIT = 64 * 1024 * 1024

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


async def request_body(request: Request, kind: type[B], limit: int) -> B:
    """The body read within `limit` and decoded strictly as `kind` (413, 400 or 422 if not)."""
    return decode_body(await read_body(request, limit), kind)


class ProblemOut(BaseModel):
    """RFC 9457 problem details, as every error of this API is answered."""

    type: str
    title: str
    status: int
    detail: str = ""


def documented_problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` of a route: each status answered as problem+json."""
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


async def deny(websocket: WebSocket, response: Response) -> None:
    """Refuse a WebSocket: the HTTP answer itself (404 problem+json) where the server
    supports it, else a close with 4000 + its status."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(response)
    else:
        await websocket.close(code=4000 + response.status_code)


def add_demo_routes(router: APIRouter, surface: Surface) -> None:
    """`/v1/demo/faults`: the demo page's door to the sandbox provider's fault injection."""
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


def install(app: FastAPI) -> None:
    """The problem answer for ProblemError, and tokens kept out of the server's logs."""
    for name in ("uvicorn.error", "uvicorn.access", "uvicorn"):
        logging.getLogger(name).addFilter(RedactTokens())

    @app.exception_handler(ProblemError)
    async def on_problem(_request: Request, exc: ProblemError) -> Response:
        return exc.response()
