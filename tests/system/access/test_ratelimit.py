"""Per-session and per-tenant token buckets under a burst of concurrent turns."""

from __future__ import annotations

import asyncio
import uuid

import httpx

from testkit.surface import Chat

from .tenants import RATE_SESSION, RATE_TENANT, assert_problem, open_session


async def _burst(chat: Chat, count: int) -> list[tuple[str, httpx.Response]]:
    ids = [f"c{uuid.uuid4().hex[:12]}" for _ in range(count)]
    answers = await asyncio.gather(
        *(
            chat.client.post(
                f"/v1/sessions/{chat.session_id}/turns",
                json={"text": "hello", "client_turn_id": client_turn_id},
                headers=chat.auth,
            )
            for client_turn_id in ids
        )
    )
    return list(zip(ids, answers, strict=True))


async def _received(chat: Chat) -> list[str]:
    return [
        e["data"]["client_turn_id"]
        for e in await chat.timeline()
        if e["type"] == "turn.received"
    ]


def _split(answers: list[tuple[str, httpx.Response]]) -> tuple[list[str], list[httpx.Response]]:
    accepted = [i for i, a in answers if a.status_code == 200]
    refused = [a for _, a in answers if a.status_code == 429]
    # A turn queued behind its session's other turns may also answer 409 busy; nothing else.
    assert {a.status_code for _, a in answers} <= {200, 409, 429}, [a.text for _, a in answers]
    return accepted, refused


async def test_a_session_burst_beyond_its_bucket_gets_429_and_writes_nothing(
    client: httpx.AsyncClient,
) -> None:
    burst, _per_second = RATE_SESSION
    chat = await open_session(client, "burst-a")
    calm = await open_session(client, "burst-a")
    answers = await _burst(chat, burst * 2)
    accepted, refused = _split(answers)
    # Refill during a slow burst may let a token or two more through, never the whole burst.
    assert len(refused) >= burst - 2, [a.status_code for _, a in answers]
    assert len(accepted) <= burst + 2
    for answer in refused:
        assert_problem(answer, 429, "rate-limited")
        assert answer.json()["scope"] == "session"
        assert int(answer.headers["Retry-After"]) >= 1
    # Exactly the accepted turns reached the log: a refused request wrote nothing.
    assert sorted(await _received(chat)) == sorted(accepted)
    # Another session of the same tenant keeps flowing meanwhile.
    assert (await calm.say("still fine"))["reply"]["text"]
    # Once the bucket refilled, the session is served again.
    retry_after = max(int(a.headers["Retry-After"]) for a in refused)
    await asyncio.sleep(retry_after)
    assert (await chat.say("and now?"))["reply"]["text"]


async def test_a_tenant_burst_is_capped_while_other_tenants_keep_flowing(
    client: httpx.AsyncClient,
) -> None:
    burst, _per_second = RATE_TENANT
    per_session = RATE_SESSION[0] - 2
    sessions = [await open_session(client, "burst-b") for _ in range(burst // per_session + 2)]
    other = await open_session(client, "calm")
    bursts, other_answer = await asyncio.gather(
        asyncio.gather(*(_burst(chat, per_session) for chat in sessions)),
        other.say("other tenant here"),
    )
    refused = [a for answers in bursts for a in _split(answers)[1]]
    assert refused, "the tenant's bucket never ran dry"
    for answer in refused:
        assert_problem(answer, 429, "rate-limited")
        assert answer.json()["scope"] == "tenant"
        assert int(answer.headers["Retry-After"]) >= 1
    accepted_total = 0
    for chat, answers in zip(sessions, bursts, strict=True):
        accepted, _ = _split(answers)
        accepted_total += len(accepted)
        assert sorted(await _received(chat)) == sorted(accepted)
    assert accepted_total <= burst + 3
    assert other_answer["reply"]["text"]
