"""Seed 003 end to end over real HTTP and WebSockets, against every service as a process."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from libs.bus import Context, Topology, connect
from libs.config import BusSettings
from libs.events import INTERACTION, Envelope, TurnReceived
from services.interaction_surface.delivery.routing import ACTED_ON
from testkit.drained import settled
from testkit.surface import (
    SurfaceStack,
    closings,
    effects,
    eventually,
    fault,
    frames_until,
    open_chat,
    unique,
)
from testkit.writer import append

# Words an acceptance must never use: the work has only started.
_CLAIMS = ("done", "granted", "completed", "finished", "listo", "hecho")


def _no_claim(text: str) -> None:
    lowered = text.lower()
    assert not any(word in lowered.split() or f"{word}." in lowered for word in _CLAIMS), text


async def test_batch_of_three_accesses_closes_once_on_history_and_stream(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    names = [unique("github"), unique("jira"), unique("confluence")]
    for name in names:
        await fault(stack, match=name, latency_ms=600, times=1)
    ws = await chat.stream()
    hello = json.loads(await ws.recv())
    assert hello["type"] == "hello"
    answer = await chat.say(f"give me access to {names[0]}, {names[1]} and {names[2]}")
    # Acceptance: answered before any operation finished, and claiming nothing.
    assert [o["status"] for o in answer["operations"]] == ["admitted"] * 3
    assert len({o["batch_id"] for o in answer["operations"]}) == 1
    _no_claim(answer["reply"]["text"])
    batch = answer["operations"][0]["batch_id"]

    async def running() -> bool:
        snap = await chat.snapshot()
        return any(o["status"] == "running" for o in snap["operations"])

    await eventually(running, every_s=0.05)
    frames = await frames_until(
        ws, lambda f: f["type"] == "message" and f["message"]["delivery_id"] is not None
    )
    closing = frames[-1]["message"]
    # Template-built when everything succeeded: no model words in it.
    assert closing["text"] == f"All done: {names[0]}, {names[1]} and {names[2]}."

    async def delivered() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        finals = [d for d in snap["deliveries"] if d["kind"] == "final"]
        return snap if finals and finals[0]["status"] == "delivered" else None

    snap = await delivered()
    snap = snap or await eventually(delivered)
    assert len(closings(snap, batch)) == 1
    final = next(d for d in snap["deliveries"] if d["kind"] == "final")
    assert final["mode"] == "proactive"
    assert {o["status"] for o in snap["operations"]} == {"committed"}
    assert all(o["attempts"] == 1 for o in snap["operations"])
    assert snap["sync_mode"] == "proactive"
    # Nothing more arrives on the stream once every service has handled everything:
    # exactly one closing there too.
    await settled(stack)
    more = []
    while True:
        try:
            more.append(json.loads(await asyncio.wait_for(ws.recv(), 0.2)))
        except TimeoutError:
            break
    pushed = [
        f for f in frames + more if f["type"] == "message" and f["message"]["delivery_id"]
    ]
    assert len(pushed) == 1
    await ws.close()
    timeline = await chat.timeline()
    kinds = [e["type"] for e in timeline]
    assert kinds.index("turn.replied") < kinds.index("delivery.ready")
    assert kinds.count("delivery.sent") == 1
    assert kinds.count("delivery.delivered") == 1
    assert kinds.index("delivery.sent") < kinds.index("delivery.delivered")
    assert all(e["session_id"] == chat.session_id for e in timeline)
    # Each successful try is recorded in its commit; no operation.attempted repeats it.
    assert kinds.count("operation.attempted") == 0
    attempts = [
        e for e in timeline if e["type"] == "operation.committed" and e["data"]["attempt"]
    ]
    assert len(attempts) == 3
    assert all(e["data"]["attempt"]["attempt"] == 1 for e in attempts)
    assert all(e["operation_id"] and e["intent_key"] and e["batch_id"] for e in attempts)
    # The worker called the provider three times at the INFO level and wrote no line per
    # request (httpx's own request log is for DEBUG: libs/serve.py).
    worker_log = (stack.logs / "operation_worker.log").read_text()
    assert "HTTP Request:" not in worker_log


async def test_the_executor_is_delivered_only_the_delivery_kinds_it_acts_on(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    topology = Topology(stack.prefix)
    stream = topology.stream_name(Context.DELIVERIES)
    durable = topology.durable("interaction-surface", Context.DELIVERIES.value)
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="probe")
    try:
        js = nc.jetstream()
        info = await js.consumer_info(stream, durable)
        assert sorted(info.config.filter_subjects or ()) == sorted(
            topology.kinds_filter(Context.DELIVERIES, ACTED_ON)
        )
        await settled(stack)
        before = (await js.consumer_info(stream, durable)).delivered.consumer_seq
        chat = await open_chat(client)
        answer = await chat.say(f"give me access to {unique('github')}")
        batch = answer["operations"][0]["batch_id"]

        async def delivered() -> dict[str, Any] | None:
            snap = await chat.snapshot()
            done = [d for d in snap["deliveries"] if d["status"] == "delivered"]
            return snap if done else None

        snap = await eventually(delivered)
        assert len(closings(snap, batch)) == 1
        await settled(stack)
        after = await js.consumer_info(stream, durable)
    finally:
        await nc.close()
    kinds = [e["type"] for e in await chat.timeline() if e["type"].startswith("delivery.")]
    assert kinds == ["delivery.ready", "delivery.decided", "delivery.sent", "delivery.delivered"]
    # The closing's decision and its sent mark; its readiness and the executor's own
    # `delivered` stay on the broker (a redelivery would count too: none is due once settled).
    assert after.delivered.consumer_seq - before == 2
    assert after.num_pending == 0


async def test_one_failure_closes_once_with_an_explanation_and_an_alternative(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    good, bad = unique("slack"), unique("legacy")
    await fault(stack, match=bad, status=400, times=1)
    answer = await chat.say(f"give me access to {good} and {bad}")
    batch = answer["operations"][0]["batch_id"]

    async def closed() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        return snap if closings(snap, batch) else None

    snap = await eventually(closed)
    [closing] = closings(snap, batch)
    assert bad in closing["text"]
    assert "Alternative:" in closing["text"]
    statuses = {o["label"]: o["status"] for o in snap["operations"]}
    assert statuses == {good: "committed", bad: "failed_final"}
    await settled(stack)
    assert len(closings(await chat.snapshot(), batch)) == 1


async def test_a_retry_is_visible_as_attempts_and_still_closes_once(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("sentry")
    await fault(stack, match=name, status=503, times=2)
    answer = await chat.say(f"give me access to {name}")
    batch = answer["operations"][0]["batch_id"]

    async def closed() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        return snap if closings(snap, batch) else None

    snap = await eventually(closed)
    assert snap["operations"][0]["status"] == "committed"
    assert snap["operations"][0]["attempts"] == 3
    assert await effects(stack, name) == 1


async def test_next_turn_resync_when_the_user_keeps_typing(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("figma")
    await fault(stack, match=name, latency_ms=300, times=1)
    answer = await chat.say(f"give me access to {name}")
    batch = answer["operations"][0]["batch_id"]
    await chat.typing(True)

    async def pinned() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        found = [d for d in snap["deliveries"] if d["kind"] == "final"]
        if found and (found[0]["reason"] or "").startswith("window_expired"):
            return snap
        return None

    snap = await eventually(pinned)
    assert snap["sync_mode"] == "next_turn"
    assert closings(snap, batch) == []
    # Still typing, then the user writes: the closing rides on that reply.
    reply = await chat.say("and how is it going?")
    snap = await chat.snapshot()
    [closing] = closings(snap, batch)
    assert closing["turn_id"] == reply["turn_id"]
    assert f"All done: {name}." in reply["reply"]["text"]
    final = next(d for d in snap["deliveries"] if d["kind"] == "final")
    assert (final["status"], final["mode"]) == ("delivered", "next_turn")
    assert snap["sync_mode"] == "next_turn"
    timeline = await chat.timeline()
    kinds = [e["type"] for e in timeline if e.get("delivery_id") == final["delivery_id"]]
    # Attached first (nobody else may say it), then the reply carrying it, then delivered.
    assert kinds[-3:] == ["delivery.attached", "turn.replied", "delivery.delivered"]
    # The pending update was context for that turn only: one message carries it.
    texts = [m["text"] for m in snap["messages"]]
    assert sum(f"All done: {name}." in t for t in texts) == 1


async def test_duplicate_tool_calls_admit_one_operation(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("notion")
    first = await chat.say(f"give me access to {name} and {name}")
    ids = {o["operation_id"] for o in first["operations"]}
    assert len(ids) == 1
    again = await chat.say(f"give me access to {name}")
    assert {o["operation_id"] for o in again["operations"]} == ids
    batch = first["operations"][0]["batch_id"]

    async def closed() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        return snap if closings(snap, batch) else None

    snap = await eventually(closed)
    assert len(snap["operations"]) == 1
    assert len(snap["batches"]) == 1
    assert await effects(stack, name) == 1


async def test_a_reply_written_behind_its_answer_is_read_at_once_and_precedes_the_next_turn(
    stack: SurfaceStack,
) -> None:
    # A chat turn answers before its turn.replied is stored. Held there for a while, the
    # answer still comes at once, a read right after it waits for the reply, and the
    # session's next turn opens only after it.
    hold_s = 0.6
    surface = stack.procs["interaction_surface"]
    async with surface.restarted_with(
        HOLDLINE_PAUSE_POINTS=f"surface.before_turn_recorded={hold_s}"
    ), httpx.AsyncClient(base_url=stack.url, timeout=30) as client:
        chat = await open_chat(client)
        answers = []
        for text in ("hello", "what can you do?"):
            sent = time.monotonic()
            answer = await chat.say(text)
            assert time.monotonic() - sent < hold_s
            snap = await chat.snapshot()
            last = snap["messages"][-1]
            assert (last["role"], last["text"], last["turn_id"]) == (
                "assistant", answer["reply"]["text"], answer["turn_id"]
            )
            answers.append(answer)
        # Two turns sent at once: the second opens once the first's reply is written.
        answers += await asyncio.gather(chat.say("thanks"), chat.say("bye"))
        timeline = await chat.timeline()
    turns = [
        (e["type"], e["turn_id"])
        for e in timeline
        if e["type"] in {"turn.received", "turn.replied"}
    ]
    assert len(turns) == 8
    for i in range(0, 8, 2):
        assert turns[i][0] == "turn.received"
        assert turns[i + 1] == ("turn.replied", turns[i][1])
    assert {t for _, t in turns} == {a["turn_id"] for a in answers}


async def test_a_retried_client_turn_id_returns_the_same_answer_and_admits_nothing(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("miro")
    text = f"give me access to {name}"
    first, second = await asyncio.gather(
        chat.say(text, client_turn_id="ct-1"), chat.say(text, client_turn_id="ct-1")
    )
    third = await chat.say(text, client_turn_id="ct-1")
    assert first == second == third
    snap = await chat.snapshot()
    assert [m["role"] for m in snap["messages"][:2]] == ["user", "assistant"]
    assert sum(1 for m in snap["messages"] if m["role"] == "user") == 1
    assert len(snap["batches"]) == 1
    assert len(snap["operations"]) == 1


async def test_a_client_turn_id_left_open_by_a_dead_surface_is_taken_over(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("miro")
    text = f"give me access to {name}"
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="dead")
    try:
        # A surface received the turn an hour ago and died before it replied.
        dead = Envelope(
            event_id=unique("ev"),
            occurred_at=datetime.now(UTC) - timedelta(hours=1),
            session_id=chat.session_id,
            turn_id="turn_dead",
            agent=chat.agent,
            event=TurnReceived(channel="chat", text=text, client_turn_id="ct-dead"),
        )
        subject = Topology(stack.prefix).session_subject(chat.session_id)
        await append(nc.jetstream(), INTERACTION, subject, dead)
    finally:
        await nc.close()
    answer = await chat.say(text, client_turn_id="ct-dead")
    assert answer["turn_id"] != "turn_dead"
    assert [o["status"] for o in answer["operations"]] == ["admitted"]
    # The repeat is answered from the log, the second run's reply.
    assert await chat.say(text, client_turn_id="ct-dead") == answer
    snap = await chat.snapshot()
    # The dead run's text and the run that took it over; one reply, one operation. The
    # provider answers at once, so the batch's closing may already have been said after
    # that reply: it is its own message, naming its delivery.
    assert [m["role"] for m in snap["messages"]].count("user") == 2
    said = [m for m in snap["messages"] if m["role"] == "assistant"]
    assert [m["turn_id"] for m in said if m["delivery_id"] is None] == [answer["turn_id"]]
    batch = answer["operations"][0]["batch_id"]
    assert [m for m in said if m["delivery_id"] is not None] in ([], closings(snap, batch))
    assert len(snap["operations"]) == 1

    async def closed() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        done = [o["status"] for o in snap["operations"]] == ["committed"]
        return snap if done and closings(snap, batch) else None

    snap = await eventually(closed)
    assert len(closings(snap, batch)) == 1
    assert await effects(stack, name) == 1


async def test_handoff_delivers_a_session_owned_result_to_the_new_agent(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client, agent="sales")
    name = unique("hubspot")
    await fault(stack, match=name, latency_ms=800, times=1)
    answer = await chat.say(f"give me access to {name}")
    batch = answer["operations"][0]["batch_id"]
    handed = await chat.handoff("support")
    assert handed["pending_operations"] == [answer["operations"][0]["operation_id"]]
    assert (handed["from_agent"], handed["agent"]) == ("sales", "support")

    async def closed() -> dict[str, Any] | None:
        # The message is written before the delivery's record says so: wait for the record
        # to settle (whatever it settles as), then check what it says.
        snap = await chat.snapshot()
        finals = [d for d in snap["deliveries"] if d["kind"] == "final"]
        settled = finals and finals[0]["status"] not in ("pending", "waiting", "sent")
        return snap if settled and closings(snap, batch) else None

    snap = await eventually(closed)
    assert snap["agent"] == "support"
    final = next(d for d in snap["deliveries"] if d["kind"] == "final")
    assert final["status"] == "delivered"
    said = [
        e for e in await chat.timeline()
        if e["type"] == "turn.replied" and e.get("delivery_id") == final["delivery_id"]
    ]
    assert [e["agent"] for e in said] == ["support"]


async def test_handoff_suppresses_an_agent_owned_result_with_its_reason(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client, agent="concierge")
    # Typing right before the turn opens a quiet window after it: the result waits there.
    await chat.typing(True)
    answer = await chat.say("check availability at casa-pepe for 2026-12-24")
    assert answer["operations"][0]["tool"] == "check_availability"
    await chat.handoff("billing", context="fresh")

    async def suppressed() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        found = [d for d in snap["deliveries"] if d["kind"] == "final"]
        return snap if found and found[0]["status"] == "suppressed" else None

    snap = await eventually(suppressed)
    final = next(d for d in snap["deliveries"] if d["kind"] == "final")
    assert final["reason"].startswith("agent_not_allowed")
    assert closings(snap, answer["operations"][0]["batch_id"]) == []


async def test_the_model_failing_or_hanging_gets_an_honest_answer(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    async with httpx.AsyncClient(base_url=stack.second_url, timeout=15) as other:
        for text in ("explode: give me access to zoom", "hang: give me access to zoom"):
            response = await other.post(
                f"/v1/sessions/{chat.session_id}/turns", json={"text": text}, headers=chat.auth
            )
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["operations"] == []
            assert "not started anything" in body["reply"]["text"]
    snap = await chat.snapshot()
    assert snap["operations"] == []
    assert snap["batches"] == []


async def test_turns_of_one_session_are_serialized_across_processes(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    async with httpx.AsyncClient(base_url=stack.second_url, timeout=15) as other:
        responses = await asyncio.gather(
            *(
                (client if i % 2 else other).post(
                    f"/v1/sessions/{chat.session_id}/turns",
                    json={"text": f"hello number {i}"},
                    headers=chat.auth,
                )
                for i in range(6)
            )
        )
    assert [r.status_code for r in responses] == [200] * 6

    async def recorded() -> list[dict[str, Any]] | None:
        # A turn's reply is written behind its answer by the process that answered it; this
        # process's reads wait for its own turns only, so the other's last may come later.
        found = [
            e for e in await chat.timeline() if e["type"] in ("turn.received", "turn.replied")
        ]
        return found if len(found) >= 12 else None

    turns = await eventually(recorded)
    # Strictly alternating: no turn opened before the previous one replied.
    assert [e["type"] for e in turns] == ["turn.received", "turn.replied"] * 6
    for received, replied in zip(turns[::2], turns[1::2], strict=True):
        assert received["turn_id"] == replied["turn_id"]


@pytest.mark.timeout(90)
async def test_the_stream_resumes_after_a_reconnect_without_loss_or_duplicates(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    names = [unique("box"), unique("dropbox")]
    for name in names:
        await fault(stack, match=name, latency_ms=700, times=1)
    ws = await chat.stream()
    seen = [json.loads(await ws.recv())]
    answer = await chat.say(f"give me access to {names[0]} and {names[1]}")
    batch = answer["operations"][0]["batch_id"]
    seen += await frames_until(ws, lambda f: f["type"] == "event"
                               and f["event"]["type"] == "operation.started")
    cursor = next(f["cursor"] for f in reversed(seen) if f["type"] in ("event", "message"))
    await ws.close()
    # Events keep happening while the client is away.
    await asyncio.sleep(1.0)
    ws = await chat.stream(after=cursor)
    resumed = await frames_until(
        ws, lambda f: f["type"] == "message" and f["message"]["delivery_id"] is not None
    )
    await ws.close()
    before = [f["event"]["event_id"] for f in seen if f["type"] in ("event", "message")]
    after = [f["event"]["event_id"] for f in resumed if f["type"] in ("event", "message")]
    assert not set(before) & set(after), "an event was sent twice"
    timeline = [e["event_id"] for e in await chat.timeline()]
    got = set(before) | set(after)
    # Everything up to the closing arrived exactly once, across the two connections.
    closing_index = next(
        i for i, e in enumerate(await chat.timeline())
        if e["type"] == "turn.replied" and e.get("batch_id") == batch
    )
    assert set(timeline[: closing_index + 1]) <= got
    assert len(before) + len(after) == len(got)
    bad = await chat.client.get(
        f"/v1/sessions/{chat.session_id}", headers={"Authorization": "Bearer nope"}
    )
    assert bad.status_code == 404
