"""Who an MCP request is (§6c): a session's bearer token, or static headers that open one.

- `Authorization: Bearer <session token>` binds the request to the session that token was
  issued for (looked up by its hash; an expired token is refused as everywhere).
- `X-Holdline-User` (and `X-Holdline-Tenant`, with the tenant's `X-Api-Key` when keys are
  configured), or a tenant-signed JWT as the bearer (its `sub` the user), for a client that
  holds only static headers: checked
  by the one identity rule (`identity.py`), then bound to that user's MCP session, opened on
  its first request. Its id is derived from the tenant and user, so every request and every
  surface finds the same session (the streamable HTTP transport keeps no state of its own).
- nothing: refused (off loopback the identity rule refuses even a named user without a
  tenant credential).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime

from libs.domain import SessionState
from libs.events import Envelope, InteractionEvent, SessionOpened

from ..auth import bearer, hash_token, new_token
from ..core.http import ProblemError
from ..core.surface import Surface
from ..identity import IdentityRefused

USER_HEADER = "x-holdline-user"
TENANT_HEADER = "x-holdline-tenant"
AGENT_HEADER = "x-holdline-agent"


class Refused(Exception):
    """No session for this request: `status` 401 (no valid credential) or 403."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def header_session_id(tenant_id: str, user_id: str) -> str:
    """The MCP session of a user who authenticates with static headers."""
    digest = hashlib.sha256(f"{tenant_id}\x00{user_id}".encode()).hexdigest()[:24]
    return f"s_mcp_{digest}"


class McpAuth:
    """Resolves each MCP request to its holdline session."""

    def __init__(self, surface: Surface) -> None:
        self.surface = surface
        # token hash -> session id, filled on a miss from the live view.
        self._by_token: dict[str, str] = {}
        # How many session logs the view held at the last scan.
        self._indexed = 0

    async def session(self, peer: str | None, headers: Mapping[str, str]) -> SessionState:
        """The request's session; Refused otherwise (nothing is written for a refusal)."""
        try:
            presented = bearer(headers.get("authorization"))
            user = headers.get(USER_HEADER)
            if presented is not None:
                found = await self._by_bearer(presented)
                if found is not None:
                    return found
                if not user:
                    user = self._jwt_user(presented)
            if not user:
                raise Refused(
                    401, "a session's bearer token or X-Holdline-User is required"
                )
            return await self._by_headers(peer, headers, user)
        except ProblemError as exc:
            raise Refused(exc.status, exc.detail or exc.title) from None

    def _jwt_user(self, presented: str) -> str:
        """A bearer that is no session's token: a tenant-signed JWT names the user (its
        `sub`); the identity rule checks it again with the tenant."""
        verifier = self.surface.jwt
        if verifier is None or not verifier.configured:
            raise Refused(401, "the bearer token is not a session's token")
        try:
            return verifier.identity(presented).user_id
        except IdentityRefused as exc:
            raise Refused(exc.status, exc.detail) from None

    async def _by_bearer(self, presented: str) -> SessionState | None:
        hashed = hash_token(presented)
        session_id = self._by_token.get(hashed)
        if session_id is None:
            await self.surface.view.sync()
            view = self.surface.view
            # The view's session logs only grow (an erased session keeps its log): sessions
            # seen since the last scan are indexed, and a stream of wrong tokens costs one
            # comparison of counts each, not a scan.
            seen = len(view.logs)
            if seen != self._indexed:
                for state in view.sessions.states.values():
                    self._by_token.setdefault(state.token_hash, state.session_id)
                self._indexed = seen
            session_id = self._by_token.get(hashed)
        if session_id is None:
            return None
        # The token's own check (constant time, expiry) on the session it names.
        return await self.surface.session_for_token(session_id, presented)

    async def _by_headers(
        self, peer: str | None, headers: Mapping[str, str], user: str
    ) -> SessionState:
        surface = self.surface
        who = surface.identify(peer, headers, user, headers.get(TENANT_HEADER))
        session_id = header_session_id(who.tenant_id, who.user_id)
        state = surface.view.session(session_id)
        if state is None:
            await surface.view.sync()
            state = surface.view.session(session_id)
        if state is None:
            agent = headers.get(AGENT_HEADER) or surface.settings.default_agent
            surface.check_agent(who.tenant_id, agent)
            opened = SessionOpened(
                user_id=who.user_id, tenant_id=who.tenant_id, agent=agent,
                # Nobody holds this session's token: the headers are its credential.
                token_hash=hash_token(new_token()),
            )
            state = await self._open(session_id, opened)
        if state.user_id != who.user_id or state.tenant_id != who.tenant_id:
            raise Refused(403, "the session belongs to someone else")
        return state

    async def _open(self, session_id: str, opened: SessionOpened) -> SessionState:
        """`session.opened` unless another request (or surface) opened it first."""
        surface = self.surface
        subject = surface.runtime.topology.session_subject(session_id)

        def decide(
            state: SessionState | None, event: SessionOpened, _now: datetime
        ) -> list[InteractionEvent]:
            return [] if state is not None else [event]

        def stamp(
            _state: SessionState | None, item: InteractionEvent, event_id: str, now: datetime
        ) -> Envelope[InteractionEvent]:
            return Envelope(
                event_id=event_id, occurred_at=now, session_id=session_id, event=item,
                agent=opened.agent,
            )

        await surface.writes.interaction.run(subject, decide, opened, stamp=stamp)
        state = surface.view.session(session_id)
        if state is None:
            await surface.view.sync()
            state = surface.view.session(session_id)
        if state is None:
            raise Refused(401, "the session could not be opened; retry")
        return state
