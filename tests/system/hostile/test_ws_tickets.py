"""WebSockets without a token in the URL: one-time tickets, the bearer header, and sockets
closed when the session token expires (services/interaction_surface/core/sockets.py).

"Off loopback" is a caller behind a proxy: a forwarding header makes a loopback peer a
remote caller, exactly as for every credential-less path (voice/trust.is_local).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, open_chat, running_stack

pytestmark = pytest.mark.timeout(90)

TOKEN_TTL_S = 8.0
PROXIED = {"X-Forwarded-For": "203.0.113.9"}


@pytest.fixture(scope="module")
def ws_stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The services, the surface's session tokens living TOKEN_TTL_S."""
    with running_stack(
        broker.url, tmp_path_factory.mktemp("ws"), "w",
        surface_env={"HOLDLINE_TOKEN_TTL_S": str(TOKEN_TTL_S), "HOLDLINE_WS_TICKET_TTL_S": "5"},
    ) as running:
        yield running


@pytest.fixture
async def chat(ws_stack: SurfaceStack) -> AsyncIterator[Chat]:
    """A fresh session (its token's clock starts now)."""
    async with httpx.AsyncClient(base_url=ws_stack.url, timeout=15.0) as http:
        yield await open_chat(http)


def ws_url(stack: SurfaceStack, chat: Chat, socket: str, query: str) -> str:
    return f"{stack.url.replace('http', 'ws', 1)}/v1/sessions/{chat.session_id}/{socket}?{query}"


async def opens(url: str, headers: dict[str, str] | None = None) -> int:
    """101 when the socket opens and says hello; else the refusal's status (HTTP or 4000+)."""
    try:
        async with connect(url, additional_headers=headers or {}) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 10))
            assert hello["type"] == "hello"
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code
    except ConnectionClosed as exc:
        return exc.rcvd.code if exc.rcvd is not None else 1006


async def ticket(chat: Chat) -> str:
    path = f"/v1/sessions/{chat.session_id}/ws-ticket"
    response = await chat.client.post(path, headers=chat.auth)
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    return str(response.json()["ticket"])


@pytest.mark.parametrize("socket", ["stream", "agent"])
async def test_a_url_token_from_behind_a_proxy_is_refused(
    ws_stack: SurfaceStack, chat: Chat, socket: str
) -> None:
    url = ws_url(ws_stack, chat, socket, f"token={chat.token}")
    assert await opens(url, PROXIED) in (401, 4401)
    # The same token in the header is accepted from there, and in the URL locally.
    assert await opens(ws_url(ws_stack, chat, socket, ""), {**PROXIED, **chat.auth}) == 101
    assert await opens(url) == 101


@pytest.mark.parametrize("socket", ["stream", "agent"])
async def test_a_ticket_opens_one_socket_once(
    ws_stack: SurfaceStack, chat: Chat, socket: str
) -> None:
    url = ws_url(ws_stack, chat, socket, f"ticket={await ticket(chat)}")
    assert await opens(url, PROXIED) == 101
    assert await opens(url, PROXIED) in (401, 4401)


async def test_a_ticket_is_refused_for_another_session(
    ws_stack: SurfaceStack, chat: Chat
) -> None:
    other = await open_chat(chat.client)
    url = ws_url(ws_stack, other, "stream", f"ticket={await ticket(chat)}")
    assert await opens(url) in (401, 4401)
    # A made-up ticket, and a ticket asked for without the session's token.
    assert await opens(ws_url(ws_stack, chat, "stream", "ticket=forged")) in (401, 4401)
    response = await chat.client.post(f"/v1/sessions/{chat.session_id}/ws-ticket")
    assert response.status_code == 401


async def _closed(ws: ClientConnection, within_s: float) -> tuple[int, str]:
    """The close frame's code and reason, once the server closes (frames read meanwhile)."""
    deadline = time.monotonic() + within_s
    frame = None
    try:
        while time.monotonic() < deadline:
            await asyncio.wait_for(ws.recv(), max(0.01, deadline - time.monotonic()))
    except ConnectionClosed as exc:
        frame = exc.rcvd
    except TimeoutError:
        pass
    assert frame is not None, f"not closed by the server within {within_s} s"
    return frame.code, frame.reason


@pytest.mark.parametrize("socket", ["stream", "agent"])
async def test_an_open_socket_closes_when_its_token_expires(
    ws_stack: SurfaceStack, chat: Chat, socket: str
) -> None:
    opened = time.monotonic()
    url = ws_url(ws_stack, chat, socket, "")
    async with connect(url, additional_headers=chat.auth) as ws:
        code, reason = await _closed(ws, TOKEN_TTL_S + 10)
    assert (code, reason) == (4401, "session token expired")
    assert time.monotonic() - opened <= TOKEN_TTL_S + 5
