"""The `Surface`: what chat, voice and the Agent API share (sessions, tokens, rate limits,
the session's interaction writes).

A session call without a bearer token is 401; a token that is not this session's is 404,
exactly as for a session that does not exist. A token older than `HOLDLINE_TOKEN_TTL_S` is
401 (`token-expired`); writes beyond the session's or tenant's rate are 429 with
`Retry-After`, refused before anything is appended. The routes are the channels':
`chat/routes.py`, `agent/routes.py`, `voice/twilio.py`; the demo's fault proxy is
`demo/routes.py`, installed by import path (`core/extra_routes.py`; it is no channel's).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import httpx

from libs.bus import InvalidSubjectToken, TooManyConflicts, token
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.domain import SessionState
from libs.events import Envelope, InteractionEvent
from libs.service import Runtime
from libs.tools import AgentDeclaration, agent_refusal

from ..auth import bearer, token_matches
from ..identity import Identity, IdentityRefused, JwtVerifier, identify, is_local
from ..settings import Settings
from .erasure import Eraser, Sweeper
from .eviction import evict_idle, touch
from .http import ProblemError, not_found
from .ratelimit import RateLimited, RateLimiter
from .view import SurfaceView
from .writes import SurfaceWrites

if TYPE_CHECKING:
    from libs.admission import Admission

    from ..agent.tool_calls import ToolCalls
    from ..chat.turns import Turns

log = logging.getLogger(__name__)


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
    # The one write path (core/writes.py), over the runtime's event store.
    writes: SurfaceWrites
    # The process's one clock and id factory (libs/clock.py), from the composition root.
    clock: Clock = SYSTEM_CLOCK
    ids: Ids = RANDOM_IDS
    started: Started | None = None
    # Checks tenant-signed JWTs (None: not configured), built once at the composition root.
    jwt: JwtVerifier | None = None
    # The declared agents (libs/tools/agents.py; empty: any agent name).
    agents: Mapping[str, AgentDeclaration] = field(default_factory=dict)
    limiter: RateLimiter = field(init=False)
    # Purges erased sessions from the broker's streams and buckets (core/erasure.py).
    eraser: Eraser = field(init=False)
    sweeper: Sweeper = field(init=False)

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(
            self.settings.rate_session, self.settings.rate_tenant,
            open_tenant=self.settings.rate_open_tenant,
            open_address=self.settings.rate_open_address,
        )
        runtime = self.runtime
        self.eraser = Eraser(self.view, runtime.topology, lambda: runtime.jetstream)
        self.sweeper = Sweeper(self.housekeep, self.settings.erasure_sweep_s)

    async def housekeep(self) -> int:
        """One pass of the sweeper: purge erased sessions that settled, evict idle ones."""
        purged = await self.eraser.sweep()
        evict_idle(self.view, self.settings.session_idle_s)
        return purged

    def identify(
        self, peer: str | None, headers: Mapping[str, str], user_id: str, tenant_id: str | None
    ) -> Identity:
        """Who a session opened by this request is for (identity.py); 401/403 otherwise."""
        try:
            return identify(
                local=is_local(peer, headers),
                api_keys=self.settings.tenant_api_keys,
                verifier=self.jwt,
                api_key=headers.get("x-api-key"),
                bearer_token=bearer(headers.get("authorization")),
                user_id=user_id,
                tenant_id=tenant_id,
                default_tenant=self.settings.default_tenant,
            )
        except IdentityRefused as exc:
            title = "Unauthorized" if exc.status == 401 else "Forbidden"
            raise ProblemError(exc.status, title, exc.detail, slug=title.lower()) from None

    def check_agent(self, tenant_id: str, agent: str, from_agent: str | None = None) -> None:
        """404 `unknown agent` / 403 `agent not allowed` unless the tenant may run it."""
        refused = agent_refusal(self.agents, tenant_id, agent, from_agent)
        if refused is not None:
            title = "Not found" if refused.status == 404 else "Forbidden"
            raise ProblemError(
                refused.status, title, f"{refused.reason}: {agent}",
                slug=refused.reason.replace(" ", "-"),
            )

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
            raise _too_many(exc) from None

    def limit_address(self, peer: str | None, headers: Mapping[str, str]) -> None:
        """Take a token of the client address's unauthenticated requests (loopback is
        exempt), or answer 429; before the credential is looked at, so guesses count."""
        if peer is None or is_local(peer, headers):
            return
        try:
            self.limiter.admit_address(peer)
        except RateLimited as exc:
            log.info("address rate limit refused an unauthenticated request")
            raise _too_many(exc) from None

    def limit_open(self, tenant_id: str) -> None:
        """Take a token of the tenant's session openings, or answer 429 having written
        nothing."""
        try:
            self.limiter.admit_open(tenant_id)
        except RateLimited as exc:
            log.info("tenant rate limit refused opening a session of %s", tenant_id)
            raise _too_many(exc) from None

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
            raise not_found() from None
        state = await self._caught_up(session_id)
        if not token_matches(state, presented) or state is None:
            raise not_found()
        self._check_expiry(session_id)
        return state

    async def known_session(self, session_id: str) -> SessionState:
        """The session, its token unexpired, for a caller proven otherwise (a WebSocket
        ticket, core/sockets.py); 404 when there is none."""
        state = await self._caught_up(session_id)
        if state is None:
            raise not_found()
        self._check_expiry(session_id)
        return state

    async def _caught_up(self, session_id: str) -> SessionState | None:
        if session_id in self.view.evicted:
            await self.view.restore(session_id)
        touch(self.view, session_id)
        state = self.view.session(session_id)
        if state is None:
            # Opened through another process a moment ago: catch up once.
            await self.view.sync()
            state = self.view.session(session_id)
        return state

    def token_expires_at(self, session_id: str) -> datetime | None:
        """When the session's token expires (None: never, `HOLDLINE_TOKEN_TTL_S=0`)."""
        ttl = self.settings.token_ttl_s
        found = self.view.log(session_id)
        if ttl <= 0 or found is None or found.opened_at is None:
            return None
        return found.opened_at + timedelta(seconds=ttl)

    def _check_expiry(self, session_id: str) -> None:
        # Only the holder of the right token learns that it expired; others get the 404.
        expires = self.token_expires_at(session_id)
        if expires is not None and self.clock.now() > expires:
            raise ProblemError(
                401,
                "Unauthorized",
                "the session token expired; open a new session",
                slug="token-expired",
            )

    async def append_interaction(
        self, session_id: str, event: InteractionEvent, *, expect: bool, **ids: Any
    ) -> Envelope[InteractionEvent]:
        """Append to the session subject: with the sequence the view holds when `expect` (read
        again and retried under the one conflict policy, then 409), else unguarded."""
        subject = self.runtime.topology.session_subject(session_id)

        def stamp(
            _state: SessionState | None, item: InteractionEvent, event_id: str, now: datetime
        ) -> Envelope[InteractionEvent]:
            return Envelope(
                event_id=event_id, occurred_at=now, session_id=session_id, event=item, **ids
            )

        if not expect:
            env = stamp(None, event, self.ids.new("ev"), self.clock.now())
            await self.writes.interaction.record(subject, env)
            return env
        try:
            written = await self.writes.interaction.run(subject, _as_is, event, stamp=stamp)
        except TooManyConflicts:
            raise ProblemError(
                409, "Conflict", "the session is changing too fast; retry"
            ) from None
        return written.envelopes[0]


def _too_many(exc: RateLimited) -> ProblemError:
    """429 problem+json with `Retry-After`, naming the limit's scope."""
    return ProblemError(
        429,
        "Too many requests",
        f"the {exc.scope} rate limit is exceeded; retry after {exc.retry_after} s",
        headers={"Retry-After": str(exc.retry_after)},
        slug="rate-limited",
        scope=exc.scope,
    )


def _as_is(
    _state: SessionState | None, event: InteractionEvent, _now: datetime
) -> list[InteractionEvent]:
    """The event asked for, whatever the state: only its sequence guards the append."""
    return [event]
