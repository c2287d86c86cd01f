"""A session's token opens that session only; tokens expire; API keys guard creation."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from testkit.surface import Chat, SurfaceStack

from .tenants import API_KEYS, TOKEN_TTL_S, assert_problem, open_session, ws_status

# Every session route with a body it accepts; the WebSocket is checked on its own.
_BODIES: dict[tuple[str, str], dict[str, Any] | None] = {
    ("get", "/v1/sessions/{session_id}"): None,
    ("delete", "/v1/sessions/{session_id}"): None,
    ("get", "/v1/sessions/{session_id}/timeline"): None,
    ("post", "/v1/sessions/{session_id}/turns"): {"text": "hello there"},
    ("post", "/v1/sessions/{session_id}/activity"): {"typing": True},
    ("post", "/v1/sessions/{session_id}/handoff"): {"agent": "billing"},
    ("get", "/v1/sessions/{session_id}/tools"): None,
    ("post", "/v1/sessions/{session_id}/tool-calls"): {
        "calls": [{"tool_call_id": "c1", "name": "provision_access",
                   "arguments": {"accesses": ["github"]}}]
    },
    ("post", "/v1/sessions/{session_id}/signals"): {"user_speaking": True},
    ("get", "/v1/sessions/{session_id}/pending"): None,
    ("post", "/v1/sessions/{session_id}/deliveries/{delivery_id}/ack"): {"status": "spoken"},
    ("post", "/v1/sessions/{session_id}/ws-ticket"): None,
}


async def _session_routes(client: httpx.AsyncClient) -> set[tuple[str, str]]:
    spec = (await client.get("/openapi.json")).json()
    return {
        (method, path)
        for path, item in spec["paths"].items()
        if "{session_id}" in path
        for method in item
    }


async def _call(
    client: httpx.AsyncClient, route: tuple[str, str], session_id: str, token: str | None
) -> httpx.Response:
    method, path = route
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return await client.request(
        method.upper(),
        path.format(session_id=session_id, delivery_id="dlv-anything"),
        json=_BODIES[route],
        headers=headers,
    )


async def _durable_events(chat: Chat) -> list[tuple[str, int]]:
    return [(e["stream"], e["seq"]) for e in await chat.timeline()]


async def test_a_token_opens_no_other_session_on_any_route(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    routes = await _session_routes(client)
    # A new route without an isolation check fails here instead of slipping through.
    assert routes == set(_BODIES), routes ^ set(_BODIES)
    mine = await open_session(client, "acme")
    neighbour = await open_session(client, "acme")
    stranger = await open_session(client, "globex")
    await neighbour.say("hello, this is the neighbour")
    before = await _durable_events(neighbour)
    cursor = (await neighbour.snapshot())["cursor"]
    for victim in (neighbour, stranger):
        for route in sorted(routes):
            answer = await _call(client, route, victim.session_id, mine.token)
            assert_problem(answer, 404)
            # No hint which part was wrong: same answer as for a session that never existed.
            assert answer.json()["detail"] == "no such session"
            missing = await _call(client, route, "s_nothing_here", mine.token)
            assert missing.json() == answer.json()
            assert_problem(await _call(client, route, victim.session_id, None), 401)
        base = victim.stream_url().replace(victim.token, mine.token)
        assert await ws_status(base) == 404
        assert await ws_status(f"{base}&after={cursor}") == 404
        assert await ws_status(base.replace("/stream?", "/agent?")) == 404
    # Nothing was written to, handed off or erased in the other sessions.
    assert await _durable_events(neighbour) == before
    snap = await neighbour.snapshot()
    assert snap["agent"] == neighbour.agent
    assert [m["role"] for m in snap["messages"]] == ["user", "assistant"]
    assert (await stranger.snapshot())["messages"] == []
    # The right token still works, including the resumed stream.
    assert await ws_status(neighbour.stream_url(after=cursor)) == 101


async def test_an_expired_token_is_401_and_a_wrong_one_still_404(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_session(client, "acme")
    opened = time.monotonic()
    other = await open_session(client, "acme")
    async with httpx.AsyncClient(base_url=stack.second_url, timeout=20.0) as short:
        late = Chat(short, chat.session_id, chat.token, chat.agent)
        assert (await late.snapshot())["session_id"] == chat.session_id
        # Until the token's lifetime ran out (reads are never rate limited): polled, since
        # the lifetime counts from the session's opening on the server's clock.
        deadline = opened + TOKEN_TTL_S + 5.0
        snapshot = ("get", "/v1/sessions/{session_id}")
        while (await _call(short, snapshot, chat.session_id, chat.token)).status_code == 200:
            assert time.monotonic() < deadline, "the token never expired"
            await asyncio.sleep(0.05)
        for route in sorted(_BODIES):
            if route[0] == "delete":
                continue
            assert_problem(await _call(short, route, chat.session_id, chat.token), 401,
                           "token-expired")
            # The holder of another token learns nothing, expired or not.
            assert_problem(await _call(short, route, chat.session_id, other.token), 404)
        assert await ws_status(late.stream_url()) == 401
        assert await ws_status(late.stream_url().replace("/stream?", "/agent?")) == 401
        before = len(await chat.timeline())
    # The first surface keeps the generous default lifetime: the same token still works.
    await chat.say("still here")
    assert len(await chat.timeline()) > before


@pytest.mark.parametrize(
    ("tenant", "key", "status"),
    [
        ("acme", API_KEYS["acme"], 201),
        # The key decides the tenant: a body naming another one is forbidden.
        ("acme", API_KEYS["globex"], 403),
        ("acme", None, 401),
        ("acme", "", 401),
        ("unknown-tenant", API_KEYS["acme"], 403),
    ],
    ids=["own-key", "other-tenants-key", "no-key", "empty-key", "tenant-without-key"],
)
async def test_tenant_api_keys_guard_session_creation(
    client: httpx.AsyncClient, tenant: str, key: str | None, status: int
) -> None:
    headers = {"X-Api-Key": key} if key is not None else {}
    answer = await client.post(
        "/v1/sessions", json={"user_id": "ana", "tenant_id": tenant}, headers=headers
    )
    if status == 201:
        assert answer.status_code == 201, answer.text
        created = answer.json()
        chat = Chat(client, created["session_id"], created["token"], created["agent"])
        assert (await chat.snapshot())["messages"] == []
    else:
        assert_problem(answer, status, "unauthorized" if status == 401 else "forbidden")
        assert API_KEYS["acme"] not in answer.text
