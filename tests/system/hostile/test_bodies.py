"""Oversized bodies and wrong content types on the surface and the provider: a clear 4xx, no trace.

Each refusal is problem+json with its own status, whether the size was declared
(Content-Length) or only discovered while reading a chunked body, and the refused request
leaves nothing behind: no turn in the session, no effect in the provider's ledger.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from testkit.surface import Chat, SurfaceStack, open_chat

# Both services keep their limits well under this (surface 16 KiB, provider 64 KiB).
BIG = 256 * 1024


async def chunked(size: int) -> AsyncIterator[bytes]:
    """A body with no Content-Length, so the server only learns its size by reading it."""
    piece = b'{"text": "' + b"a" * 8182
    sent = 0
    while sent < size:
        yield piece
        sent += len(piece)


def assert_problem(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["status"] == status


async def turns_of(chat: Chat) -> int:
    return sum(1 for e in await chat.timeline() if e["type"] == "turn.received")


@pytest.mark.parametrize("declared", [True, False])
async def test_oversized_bodies_are_413_problems_and_leave_no_trace(
    stack: SurfaceStack, client: httpx.AsyncClient, declared: bool
) -> None:
    chat = await open_chat(client)
    text = "a" * BIG
    body = f'{{"text": "{text}"}}'.encode() if declared else chunked(BIG)
    answer = await client.post(
        f"/v1/sessions/{chat.session_id}/turns", content=body,
        headers={**chat.auth, "content-type": "application/json"},
    )
    assert_problem(answer, 413)
    creating = await client.post(
        "/v1/sessions", content=body if declared else chunked(BIG),
        headers={"content-type": "application/json"},
    )
    assert_problem(creating, 413)
    assert await turns_of(chat) == 0
    key = f"big-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=stack.provider_url, timeout=15.0) as provider:
        payload = (
            f'{{"tenant_id": "acme", "user_id": "u1", "resource": "wiki", "reference": "{text}"}}'
        )
        refused = await provider.post(
            "/v1/accesses",
            content=payload.encode() if declared else chunked(BIG),
            headers={"Idempotency-Key": key, "content-type": "application/json"},
        )
        assert_problem(refused, 413)
        assert (await provider.get("/ledger", params={"key": key})).json()["entries"] == []
    # The session is fine and takes a normal turn afterwards.
    await chat.say("hello")
    assert await turns_of(chat) == 1


WRONG = [
    ("text/plain", b"give me access to wiki"),
    ("application/x-www-form-urlencoded", b"text=hello&user_id=u1"),
    (
        "multipart/form-data; boundary=xx",
        b'--xx\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--xx--\r\n',
    ),
    ("application/xml", b"<text>hello</text>"),
    ("application/json", b"\xff\xfe{\x00"),
    ("application/json", b""),
]


@pytest.mark.parametrize(("media", "raw"), WRONG)
async def test_bodies_that_are_not_json_are_refused_as_problems(
    stack: SurfaceStack, client: httpx.AsyncClient, media: str, raw: bytes
) -> None:
    chat = await open_chat(client)
    headers = {"content-type": media}
    for path, extra in [
        ("/v1/sessions", {}),
        (f"/v1/sessions/{chat.session_id}/turns", chat.auth),
        (f"/v1/sessions/{chat.session_id}/activity", chat.auth),
        (f"/v1/sessions/{chat.session_id}/handoff", chat.auth),
    ]:
        answer = await client.post(path, content=raw, headers={**headers, **extra})
        assert_problem(answer, 400)
    assert await turns_of(chat) == 0
    assert (await chat.snapshot())["agent"] == chat.agent
    key = f"ct-{uuid.uuid4().hex}"
    async with httpx.AsyncClient(base_url=stack.provider_url, timeout=15.0) as provider:
        for path in ("/v1/accesses", "/v1/bookings", "/v1/transfers"):
            answer = await provider.post(
                path, content=raw, headers={**headers, "Idempotency-Key": key}
            )
            assert_problem(answer, 400)
        assert (await provider.get("/ledger", params={"key": key})).json()["entries"] == []


async def test_client_turn_ids_that_cannot_be_stored_are_refused_before_the_turn(
    client: httpx.AsyncClient,
) -> None:
    # Found by the OpenAPI fuzzer: a trailing dot passed validation, then failed as a 500.
    chat = await open_chat(client)
    for bad in ("lyjHZy.", ".a", "a..b", "a b", "x" * 65):
        answer = await client.post(
            f"/v1/sessions/{chat.session_id}/turns",
            json={"text": "hello", "client_turn_id": bad},
            headers=chat.auth,
        )
        assert_problem(answer, 422)
    assert await turns_of(chat) == 0
    first = await chat.say("hello", client_turn_id="ct.1-a_b")
    again = await chat.say("hello", client_turn_id="ct.1-a_b")
    assert again["turn_id"] == first["turn_id"]
    assert await turns_of(chat) == 1
