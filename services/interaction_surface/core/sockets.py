"""Who may open a session's WebSocket, and until when (`/stream`, `/agent`).

A browser cannot set headers on a WebSocket, and a token in a URL ends up in access logs and
proxies' logs, so a socket authenticates by one of:

- `?ticket=`: a one-time ticket from `POST /v1/sessions/{id}/ws-ticket` (bearer-authenticated),
  valid `HOLDLINE_WS_TICKET_TTL_S` and for that session only. Its use is claimed in a KV
  bucket (a compare-and-set on the entry's revision), so a second use is refused by every
  surface, not only the one that issued it;
- `Authorization: Bearer <session token>`: for clients that can set headers (agents, SDKs);
- `?token=`: the session token in the URL (the original form, docs/contract.md §6), accepted
  from a local caller only (a loopback peer with no forwarding header, the rule of every
  credential-less path); from anywhere else it is refused (401 `token-in-url`).

An open socket is closed when its session token expires (`HOLDLINE_TOKEN_TTL_S` after the
session opened): close code 4401, reason `session token expired`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, TypeVar

from fastapi import APIRouter, Header, WebSocket
from nats.js.api import KeyValueConfig, StorageType
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from libs.domain import SessionState
from libs.json_response import JSONResponse
from libs.problems import problem

from ..auth import bearer
from ..identity import is_local
from .http import ProblemError, deny, documented_problems

if TYPE_CHECKING:
    from .surface import Surface

log = logging.getLogger(__name__)

T = TypeVar("T")

# The close code of a socket whose session token expired (4000 + 401, as a refusal's).
EXPIRED_CODE = 4401
EXPIRED_REASON = "session token expired"
# Claimed tickets stay in the bucket this much past their expiry, so a late replay still
# finds its claim.
_CLAIM_MARGIN_S = 60.0
_USED = b"used"


def _key(ticket: str) -> str:
    return hashlib.sha256(ticket.encode()).hexdigest()


def _refused(detail: str, slug: str = "ws-ticket-refused") -> ProblemError:
    return ProblemError(401, "Unauthorized", detail, slug=slug)


class SocketAuth:
    """Tickets (issued and claimed in a KV bucket) and the rule of the three credentials."""

    def __init__(self, surface: Surface) -> None:
        self.surface = surface
        self._bucket: KeyValue | None = None

    @property
    def ttl_s(self) -> float:
        """How long a ticket stays valid."""
        return self.surface.settings.ws_ticket_ttl_s

    async def _tickets(self) -> KeyValue:
        if self._bucket is None:
            js = self.surface.runtime.jetstream
            name = self.surface.runtime.topology.bucket("ws-tickets")
            try:
                self._bucket = await js.create_key_value(
                    KeyValueConfig(
                        bucket=name, history=1, ttl=self.ttl_s + _CLAIM_MARGIN_S,
                        storage=StorageType.FILE, replicas=self.surface.settings.bus.replicas,
                    )
                )
            except Exception:  # noqa: BLE001 - declared by another surface with other settings
                self._bucket = await js.key_value(name)
        return self._bucket

    async def issue(self, session_id: str) -> str:
        """A fresh one-time ticket for this session."""
        ticket = secrets.token_urlsafe(32)
        expires = self.surface.clock.now().timestamp() + self.ttl_s
        await (await self._tickets()).create(_key(ticket), f"{session_id} {expires}".encode())
        return ticket

    async def redeem(self, session_id: str, ticket: str) -> SessionState:
        """The session the ticket was issued for, once; 401 for any other use."""
        kv = await self._tickets()
        try:
            entry = await kv.get(_key(ticket))
        except KeyNotFoundError:
            raise _refused("the ticket is unknown or expired") from None
        value = entry.value or b""
        if value == _USED:
            raise _refused("the ticket was used already")
        owner, _, expires = value.decode().partition(" ")
        if owner != session_id:
            raise _refused("the ticket is for another session")
        if self.surface.clock.now().timestamp() > float(expires or 0):
            raise _refused("the ticket expired")
        try:
            await kv.update(_key(ticket), _USED, last=entry.revision)
        except KeyWrongLastSequenceError:
            raise _refused("the ticket was used already") from None
        return await self.surface.known_session(session_id)

    async def session(self, websocket: WebSocket, session_id: str) -> SessionState:
        """The session a socket may open, by ticket, header or (locally) URL token."""
        query = websocket.query_params
        ticket = query.get("ticket")
        if ticket:
            return await self.redeem(session_id, ticket)
        header = bearer(websocket.headers.get("authorization"))
        if header:
            return await self.surface.session_for_token(session_id, header)
        token = query.get("token")
        peer = websocket.client.host if websocket.client else None
        if token and not is_local(peer, websocket.headers):
            log.info("refused a session token in a WebSocket URL from %s", peer)
            raise _refused(
                "a session token in the URL is accepted from a local caller only: use a "
                "ticket (POST /v1/sessions/{id}/ws-ticket, then ?ticket=) or an "
                "Authorization: Bearer header",
                slug="token-in-url",
            )
        return await self.surface.session_for_token(session_id, token)

    async def admit(
        self, websocket: WebSocket, session_id: str, after: Callable[[str | None], T]
    ) -> tuple[SessionState, T] | None:
        """The session a socket may open and its `?after=` cursor (read by `after`); None
        once the socket was denied (a refused credential as its problem, a bad cursor 400)."""
        try:
            state = await self.session(websocket, session_id)
            cursor = after(websocket.query_params.get("after"))
        except ProblemError as exc:
            await deny(websocket, exc.response())
            return None
        except ValueError as exc:
            await deny(websocket, problem(400, "Bad request", str(exc)))
            return None
        return state, cursor

    @contextlib.asynccontextmanager
    async def until_expiry(self, websocket: WebSocket, session_id: str) -> AsyncIterator[None]:
        """Close the socket (4401) when the session token expires, if it does."""
        expires = self.surface.token_expires_at(session_id)
        if expires is None:
            yield
            return

        async def close_at_expiry() -> None:
            wait = (expires - self.surface.clock.now()).total_seconds()
            await asyncio.sleep(max(0.0, wait))
            log.info("closing a WebSocket of session %s: its token expired", session_id)
            with contextlib.suppress(Exception):
                await websocket.close(code=EXPIRED_CODE, reason=EXPIRED_REASON)

        closer = asyncio.create_task(close_at_expiry())
        try:
            yield
        finally:
            closer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await closer


def add_ticket_route(router: APIRouter, auth: SocketAuth) -> None:
    """`POST /v1/sessions/{id}/ws-ticket`: a one-time ticket for this session's sockets."""

    @router.post(
        "/v1/sessions/{session_id}/ws-ticket",
        status_code=201,
        summary="A one-time ticket to open this session's WebSocket",
        responses=documented_problems(401, 404, 429),
    )
    async def ws_ticket(
        session_id: str, authorization: str | None = Header(default=None)
    ) -> JSONResponse:
        state = await auth.surface.session(session_id, authorization)
        auth.surface.limit(state)  # each ticket is a write: the session's rate applies
        ticket = await auth.issue(state.session_id)
        return JSONResponse(
            {"ticket": ticket, "expires_in_s": auth.ttl_s}, status_code=201,
            headers={"Cache-Control": "no-store"},
        )
