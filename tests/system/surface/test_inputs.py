"""Bad input, wrong tokens and oversized bodies: problem+json, never data, never a crash."""

from __future__ import annotations

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from testkit.surface import SurfaceStack, open_chat

PROBLEM = "application/problem+json"


def _problem(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body = response.json()
    assert body["status"] == status
    assert body["title"]


async def test_session_creation_validates_ids(client: httpx.AsyncClient) -> None:
    _problem(await client.post("/v1/sessions", content=b"{not json"), 400)
    _problem(await client.post("/v1/sessions", content=b""), 400)
    _problem(await client.post("/v1/sessions", json={}), 422)
    _problem(await client.post("/v1/sessions", json={"user_id": 42}), 422)
    _problem(await client.post("/v1/sessions", json={"user_id": "a b"}), 422)
    _problem(await client.post("/v1/sessions", json={"user_id": "x" * 65}), 422)
    _problem(await client.post("/v1/sessions", json={"user_id": "u", "tenant_id": "t/1"}), 422)
    ok = await client.post(
        "/v1/sessions", json={"user_id": "Ana.Lopez-1_x", "tenant_id": "acme.eu", "agent": "bot"}
    )
    assert ok.status_code == 201
    body = ok.json()
    assert set(body) == {"session_id", "token", "agent"}
    assert body["agent"] == "bot"


async def test_an_open_surface_serves_only_local_session_creation(
    client: httpx.AsyncClient,
) -> None:
    # No tenant credential is configured here: a proxied (remote) caller cannot name any user.
    remote = await client.post(
        "/v1/sessions",
        json={"user_id": "ana", "tenant_id": "acme"},
        headers={"X-Forwarded-For": "203.0.113.9"},
    )
    _problem(remote, 401)


async def test_turn_bodies_are_bounded_and_typed(client: httpx.AsyncClient) -> None:
    chat = await open_chat(client)
    url = f"/v1/sessions/{chat.session_id}/turns"
    _problem(await client.post(url, content=b'{"text": ', headers=chat.auth), 400)
    _problem(await client.post(url, content=b'{"text": "\xff\xfe"}', headers=chat.auth), 400)
    _problem(await client.post(url, json={"text": 5}, headers=chat.auth), 422)
    _problem(await client.post(url, json={"txt": "hi"}, headers=chat.auth), 422)
    _problem(await client.post(url, json={"text": "   "}, headers=chat.auth), 422)
    _problem(await client.post(url, json={"text": "a" * 2001}, headers=chat.auth), 422)
    _problem(
        await client.post(url, json={"text": "hi", "client_turn_id": "no spaces"},
                          headers=chat.auth),
        422,
    )
    _problem(await client.post(url, content=b"[" * 100_000, headers=chat.auth), 413)
    big = b'{"text": "' + b"a" * (2 * 1024 * 1024) + b'"}'
    _problem(await client.post(url, content=big, headers=chat.auth), 413)
    # The surface is still fine afterwards.
    assert (await chat.say("hello"))["reply"]["text"]


async def test_tokens_never_open_another_session(client: httpx.AsyncClient) -> None:
    mine = await open_chat(client)
    theirs = await open_chat(client)
    await theirs.say("hello")
    url = f"/v1/sessions/{theirs.session_id}"
    _problem(await client.get(url), 401)
    _problem(await client.get(url, headers={"Authorization": "Basic abc"}), 401)
    _problem(await client.get(url, headers=mine.auth), 404)
    _problem(await client.get(url, headers={"Authorization": "Bearer " + theirs.token[:-1]}), 404)
    _problem(await client.get(f"{url}/timeline", headers=mine.auth), 404)
    _problem(await client.post(f"{url}/turns", json={"text": "hi"}, headers=mine.auth), 404)
    _problem(await client.post(f"{url}/activity", json={"typing": True}, headers=mine.auth), 404)
    _problem(await client.post(f"{url}/handoff", json={"agent": "x"}, headers=mine.auth), 404)
    _problem(await client.get("/v1/sessions/s_doesnotexist", headers=mine.auth), 404)
    _problem(await client.get("/v1/sessions/bad.id*", headers=mine.auth), 404)
    # Another session's token is refused before any body is looked at.
    wrong = await client.post(f"{url}/turns", content=b"garbage", headers=mine.auth)
    _problem(wrong, 404)
    assert "hello" not in wrong.text
    with pytest.raises(InvalidStatus) as refused:
        await connect(theirs.stream_url().replace(theirs.token, mine.token))
    assert refused.value.response.status_code == 404
    # The timeline never shows the token's hash.
    timeline = await theirs.timeline()
    assert all("token_hash" not in e["data"] for e in timeline)


async def test_activity_and_handoff_validate_their_bodies(client: httpx.AsyncClient) -> None:
    chat = await open_chat(client)
    base = f"/v1/sessions/{chat.session_id}"
    _problem(await client.post(f"{base}/activity", json={"typing": "yes"}, headers=chat.auth), 422)
    _problem(await client.post(f"{base}/handoff", json={}, headers=chat.auth), 422)
    _problem(
        await client.post(f"{base}/handoff", json={"agent": "x", "context": "both"},
                          headers=chat.auth),
        422,
    )
    _problem(await client.post("/v1/sessions/x/nowhere", json={}), 404)


async def test_metrics_observe_acceptance(client: httpx.AsyncClient, stack: SurfaceStack) -> None:
    chat = await open_chat(client)
    await chat.say("hello")
    text = (await client.get("/metrics")).text
    count = next(
        line for line in text.splitlines() if line.startswith("holdline_acceptance_seconds_count")
    )
    assert float(count.split()[-1]) >= 1
