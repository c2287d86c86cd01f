"""Seed scenarios driven over chat: HTTP turns, the WebSocket stream, provider faults, kill -9."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator

import httpx
import pytest

from libs.bus import Context
from libs.config import BACKGROUND_NICE
from testkit.processes import Broker
from testkit.surface import (
    Chat,
    SurfaceStack,
    closings,
    eventually,
    fault,
    frames_until,
    open_chat,
    unique,
)

from .checks import (
    Durable,
    callbacks_delivered,
    closed_once,
    durable,
    effects_of,
    event_of,
    final_said,
    held_back,
    ids,
    in_order,
    ledger,
    tag,
    timeline,
)
from .stacks import running

DAY = "2026-12-24"


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Bookings complete asynchronously with every callback sent twice; transfers go to a
    provider that ignores idempotency keys (the worker must reconcile before resending)."""
    yield from running(
        broker,
        tmp_path_factory,
        {
            "HOLDLINE_SANDBOX_CALLBACK_TWICE": "1",
            "SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY": "1",
            "HOLDLINE_MIN_QUIET_MS": "600",
        },
    )


async def test_timeout_after_sending_a_mutation(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("vault")
    await fault(stack, match=name, timeout_after_commit=True, times=1)
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    record, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert closing["text"] == f"All done: {name}."
    kinds = record.kinds(Context.OPERATIONS, operation_id=op)
    # The lost answer is recorded, then the truth is recovered under the same key.
    attempts = [
        i.envelope.event for i in record.events[Context.OPERATIONS]
        if i.envelope.operation_id == op and i.envelope.event.__struct_config__.tag
        == "operation.attempted"
    ]
    assert attempts[0].outcome == "timeout_after_send"
    in_order(kinds, "operation.started", "operation.attempted", "operation.committed")
    assert await effects_of(stack, name) == {name: 1}


async def test_duplicated_result(client: httpx.AsyncClient, stack: SurfaceStack) -> None:
    chat = await open_chat(client)
    place = unique("casa")
    before = await callbacks_delivered(stack)
    batch, [op] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 21:00"))

    async def both_callbacks() -> bool:
        return await callbacks_delivered(stack) >= before + 2

    # The provider completes asynchronously and calls back twice with the same result.
    await eventually(both_callbacks)
    record, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert place in closing["text"]
    kinds = record.kinds(Context.OPERATIONS, operation_id=op)
    assert kinds.count("operation.committed") == 1
    assert event_of(record, Context.OPERATIONS, "operation.committed", operation_id=op).via in (
        "callback", "poll",
    )
    in_order(kinds, "operation.admitted", "operation.started", "operation.committed")
    assert await effects_of(stack, place) == {place: 1}


async def test_reconnect_while_the_action_is_still_running(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("grafana")
    await fault(stack, match=name, latency_ms=1500, times=1)
    ws = await chat.stream()
    assert json.loads(await ws.recv())["type"] == "hello"
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    seen = await frames_until(
        ws, lambda f: f["type"] == "event" and f["event"]["type"] == "operation.started"
    )
    cursor = seen[-1]["cursor"]
    await ws.close()
    # The client is gone while the provider works; nothing is lost when it comes back.
    ws = await chat.stream(after=cursor)
    resumed = await frames_until(
        ws, lambda f: f["type"] == "message" and f["message"]["delivery_id"] is not None
    )
    await ws.close()
    pushed = [f for f in resumed if f["type"] == "message" and f["message"]["delivery_id"]]
    assert [f["message"]["text"] for f in pushed] == [f"All done: {name}."]
    resumed_kinds = [f["event"]["type"] for f in resumed if f["type"] == "event"]
    assert "operation.started" not in resumed_kinds
    assert "operation.committed" in resumed_kinds
    await closed_once(stack, chat, batch, {op: "committed"})
    assert await effects_of(stack, name) == {name: 1}


async def test_handoff_before_an_async_tool_completes(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client, agent="sales")
    place = unique("bistro")
    await fault(stack, match=place, latency_ms=800, times=1)
    batch, [op] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 20:00"))
    handed = await chat.handoff("support")
    assert handed["pending_operations"] == [op]
    _, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert place in closing["text"]
    events = await timeline(chat)
    kinds = [e["type"] for e in events]
    in_order(kinds, "operation.admitted", "agent.handed_off", "operation.committed",
             "delivery.delivered")
    said = [e for e in events if e["type"] == "turn.replied"
            and e.get("delivery_id") == closing["delivery_id"]]
    # The result belonged to the session: the new agent says it, once.
    assert [e["agent"] for e in said] == ["support"]
    assert await effects_of(stack, place) == {place: 1}


async def test_crash_between_committed_and_the_acknowledgement_to_the_user(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    coordinator = stack.procs["batch_coordinator"]
    coordinator.kill9()
    # Disarmed in `finally`: a failed assertion must not leave the shared stack with a
    # coordinator armed to die at every claim.
    try:
        coordinator.env["HOLDLINE_CRASH_POINTS"] = "coordinator.after_claim"
        await asyncio.to_thread(coordinator.start)
        chat = await open_chat(client)
        name = unique("sonar")
        batch, [op] = ids(await chat.say(f"give me access to {name}"))
        assert coordinator.proc is not None
        # kill -9 at the point: committed, the closing claimed, nothing said yet.
        await asyncio.to_thread(coordinator.proc.wait, 20)
        assert coordinator.proc.returncode == -signal.SIGKILL
        record = await durable(stack, chat.session_id)
        assert record.status(op) == "committed"
        assert record.finals(batch) == []
        assert [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]] == []
    finally:
        coordinator.env.pop("HOLDLINE_CRASH_POINTS", None)
        coordinator.kill9()  # a no-op once the crash point has fired
        await asyncio.to_thread(coordinator.start)
    record, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert closing["text"] == f"All done: {name}."
    assert await effects_of(stack, name) == {name: 1}


async def test_late_result_after_the_intent_changed(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    """Also seed 002's "a new intent makes an earlier update stale"."""
    chat = await open_chat(client)
    place = unique("lhardy")
    # The 21:00 request is still at the provider when the user changes their mind.
    await fault(stack, match=place, latency_ms=1500, times=1)
    old_batch, [old] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 21:00"))

    async def running() -> bool:
        snap = await chat.snapshot()
        return any(o["operation_id"] == old and o["status"] == "running"
                   for o in snap["operations"])

    await eventually(running, every_s=0.05)
    new_batch, [new] = ids(await chat.say("actually, make it 21:30"))
    assert new != old
    _, closing = await closed_once(stack, chat, new_batch, {new: "committed"})
    assert closing["text"] == f"All done: {place} {DAY} 21:30."

    async def old_settled() -> Durable | None:
        record = await durable(stack, chat.session_id)
        return record if record.status(old) and record.kinds(
            Context.DELIVERIES, batch_id=old_batch
        )[-1:] == ["delivery.superseded"] else None

    record = await eventually(old_settled)
    assert record.status(old) == "cancelled"
    # The cancel was recorded after the request had started: the provider was asked.
    in_order(record.kinds(Context.OPERATIONS, operation_id=old),
             "operation.started", "operation.cancel_requested", "operation.cancelled")
    [stale] = record.finals(old_batch)
    assert record.said(stale) == []
    reason = event_of(record, Context.DELIVERIES, "delivery.superseded", delivery_id=stale)
    assert new in reason.reason
    snap = await chat.snapshot()
    assert closings(snap, old_batch) == []
    assert [d["status"] for d in snap["deliveries"] if d["batch_id"] == old_batch] == [
        "superseded"
    ]
    # One real booking at the restaurant: the 21:30 one.
    assert await effects_of(stack, place) == {place: 1}


async def test_two_concurrent_tool_calls_on_the_same_resource(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    ana, bea = await open_chat(client), await open_chat(client)
    name = unique("figma")
    await fault(stack, match=name, latency_ms=400, times=2)
    text = f"give me access to {name}"
    # Ana's call goes out twice at once; Bea asks for the same resource at the same moment.
    first, second, other = await asyncio.gather(ana.say(text), ana.say(text), bea.say(text))
    batch, [op] = ids(first)
    assert ids(second) == (batch, [op])
    bea_batch, [bea_op] = ids(other)
    assert bea_op != op
    await closed_once(stack, ana, batch, {op: "committed"})
    await closed_once(stack, bea, bea_batch, {bea_op: "committed"})
    assert len((await ana.snapshot())["operations"]) == 1
    entries = await ledger(stack)
    # One effect per intent: Ana's and Bea's, each under its own key.
    assert sorted((e["key"], e["effects"]) for e in entries if e["resource"] == name) == sorted(
        [(op, 1), (bea_op, 1)]
    )


async def test_retry_with_idempotency_support_at_the_provider(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("sentry")
    # The first answer is lost after the commit, then the provider is briefly down.
    await fault(stack, match=name, timeout_after_commit=True, times=1)
    await fault(stack, match=name, status=503, times=1)
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    record, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert closing["text"] == f"All done: {name}."
    kinds = record.kinds(Context.OPERATIONS, operation_id=op)
    # The provider honours the key: resending is safe, and it answers with the stored result.
    assert kinds.count("operation.started") >= 2
    assert "operation.reconciled" not in kinds
    assert await effects_of(stack, name) == {name: 1}


async def test_retry_without_idempotency_support_at_the_provider(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    account = unique("bob")
    asked = await chat.say(f"send 50 euros to {account}")
    batch, [op] = ids(asked)
    assert [o["status"] for o in asked["operations"]] == ["awaiting_confirmation"]
    await fault(stack, match=f"{account}*", timeout_after_commit=True, times=1)
    await chat.say("yes")
    record, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert closing["text"] == f"All done: 50.00 EUR to {account}."
    kinds = record.kinds(Context.OPERATIONS, operation_id=op)
    # This provider ignores keys: the lost answer is looked up, never blindly resent.
    assert kinds.count("operation.started") == 1
    in_order(kinds, "operation.confirmed", "operation.started", "operation.unknown",
             "operation.committed")
    assert event_of(record, Context.OPERATIONS, "operation.committed", operation_id=op).via == (
        "reconcile"
    )
    assert await effects_of(stack, account) == {account: 1}


async def test_tool_finishes_while_the_user_is_still_speaking(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("trello")
    # Slow enough that the user is typing before the effect, even on a loaded machine.
    await fault(stack, match=name, latency_ms=1500, times=1)
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    await chat.typing(True)
    await held_back(chat, batch)
    record = await durable(stack, chat.session_id)
    assert record.status(op) == "committed"
    assert closings(await chat.snapshot(), batch) == []
    await chat.typing(False)
    record, closing = await closed_once(stack, chat, batch, {op: "committed"})
    assert closing["text"] == f"All done: {name}."
    kinds = [e["type"] for e in await timeline(chat)]
    stopped = max(i for i, k in enumerate(kinds) if k == "user.activity")
    # Committed while the user typed; said only once they stopped.
    assert kinds.index("operation.committed") < stopped < kinds.index("delivery.delivered")
    assert await effects_of(stack, name) == {name: 1}


async def test_two_tools_of_the_same_batch_finish_in_reverse_order(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    slow, fast = unique("okta"), unique("asana")
    # Slow enough that the fast one settles first even on a loaded machine.
    await fault(stack, match=slow, latency_ms=1500, times=1)
    batch, [first, second] = ids(await chat.say(f"give me access to {slow} and {fast}"))
    record, closing = await closed_once(
        stack, chat, batch, {first: "committed", second: "committed"}
    )
    assert closing["text"] == f"All done: {slow} and {fast}."
    closing_events = [i.envelope.event for i in record.events[Context.BATCHES]
                      if tag(i) == "batch.drained" and i.envelope.batch_id == batch]
    assert len(closing_events) == 1
    # Every member once, in the order they committed: the fast one first.
    settled = [m.operation_id for m in closing_events[0].settled]  # type: ignore[union-attr]
    assert settled == [second, first]
    kinds = record.kinds(Context.BATCHES, batch_id=batch)
    assert kinds == ["batch.opened", "batch.drained"]
    assert await effects_of(stack, slow, fast) == {slow: 1, fast: 1}


async def test_user_explicitly_cancels_an_operation(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    place = unique("botin")
    await fault(stack, match=place, latency_ms=600, times=1)
    batch, [op] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 14:00"))

    async def started() -> bool:
        record = await durable(stack, chat.session_id)
        return "operation.started" in record.kinds(Context.OPERATIONS, operation_id=op)

    await eventually(started, every_s=0.05)
    await chat.say("cancel the booking")
    record, closing = await closed_once(stack, chat, batch, {op: "cancelled"})
    assert closing["text"].startswith("Cancelled as you asked")
    in_order(record.kinds(Context.OPERATIONS, operation_id=op),
             "operation.started", "operation.cancel_requested", "operation.cancelled")
    assert await effects_of(stack, place) == {place: 0}


async def test_process_restarts_after_the_effect_and_before_the_follow_up(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name = unique("zendesk")
    # Slow enough that the user is typing before the effect, even on a loaded machine.
    await fault(stack, match=name, latency_ms=1500, times=1)
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    await chat.typing(True)
    await held_back(chat, batch)
    assert await effects_of(stack, name) == {name: 1}
    # The effect is real and the closing is pending: the speaker and the policy die.
    roles = ("delivery_policy", "interaction_surface")
    for role in roles:
        stack.procs[role].kill9()
    for role in roles:
        stack.procs[role].start(wait_ready=False)
    for role in roles:
        await asyncio.to_thread(stack.procs[role].wait_ready, 60)
    # Whether the quiet window passed during the restart or not, the closing is still owed:
    # it comes proactively, or rides on the user's next message.
    await chat.typing(False)
    reply = await chat.say("how is it going?")
    _, closing = await closed_once(stack, chat, batch, {op: "committed"})
    if closing["turn_id"] == reply["turn_id"]:
        assert closing["text"].startswith(f"Before that: All done: {name}.")
    else:
        assert closing["text"] == f"All done: {name}."
    record = await durable(stack, chat.session_id)
    in_order(record.kinds(Context.DELIVERIES, batch_id=batch),
             "delivery.ready", "delivery.decided", "delivery.delivered")
    assert await effects_of(stack, name) == {name: 1}


async def test_an_urgent_result_interrupts_and_a_normal_one_waits(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    name, account = unique("jira"), unique("eve")
    await fault(stack, match=name, latency_ms=700, times=1)
    await fault(stack, match=f"{account}*", status=403, times=1)
    urgent, [transfer] = ids(await chat.say(f"send 70 euros to {account}"))
    normal, [access] = ids(await chat.say(f"give me access to {name}"))
    await chat.say("yes")
    # The user is typing when both results come in.
    await chat.typing(True)
    interrupted = await final_said(chat, urgent)
    assert (interrupted["mode"], interrupted["priority"]) == ("interrupt", "urgent")
    snap = await held_back(chat, normal)
    assert closings(snap, normal) == []
    [told] = closings(snap, urgent)
    assert account in told["text"]
    await chat.typing(False)
    await closed_once(stack, chat, urgent, {transfer: "failed_final"})
    record, _ = await closed_once(stack, chat, normal, {access: "committed"})
    decisions = [
        (i.envelope.delivery_id, i.envelope.event.decision)
        for i in record.events[Context.DELIVERIES] if tag(i) == "delivery.decided"
    ]
    assert (interrupted["delivery_id"], "interrupt") in decisions
    kinds = [e["type"] for e in await timeline(chat)]
    # Said while the user was still typing: before they stopped.
    said = [i for i, e in enumerate(await timeline(chat))
            if e["type"] == "delivery.delivered" and e["delivery_id"] == interrupted["delivery_id"]]
    stopped = max(i for i, k in enumerate(kinds) if k == "user.activity")
    assert said[0] < stopped
    assert await effects_of(stack, name, account) == {name: 1, account: 0}


async def test_partial_failure_in_a_batch(client: httpx.AsyncClient, stack: SurfaceStack) -> None:
    chat = await open_chat(client)
    good, slow, bad = unique("gitea"), unique("linear"), unique("legacy")
    await fault(stack, match=slow, latency_ms=600, times=1)
    await fault(stack, match=bad, status=400, times=1)
    batch, ops = ids(await chat.say(f"give me access to {good}, {slow} and {bad}"))
    statuses = dict(zip(ops, ("committed", "committed", "failed_final"), strict=True))
    record, closing = await closed_once(stack, chat, batch, statuses)
    # One closing, after the slowest member, that says what failed and what can be done.
    assert bad in closing["text"]
    assert "Alternative:" in closing["text"]
    drained = [i.envelope.event for i in record.events[Context.BATCHES]
               if tag(i) == "batch.drained" and i.envelope.batch_id == batch]
    assert len(drained) == 1
    members = {m.operation_id: m.status for m in drained[0].settled}  # type: ignore[union-attr]
    assert members == statuses
    assert await effects_of(stack, good, slow, bad) == {good: 1, slow: 1, bad: 0}


async def booked_and_held_back(
    stack: SurfaceStack, chat: Chat, place: str, time: str
) -> tuple[str, str, str]:
    """A booking whose closing waits for the user's next message; batch, operation, closing."""
    await fault(stack, match=place, latency_ms=800, times=1)
    batch, [op] = ids(await chat.say(f"book a table for two at {place} on {DAY} at {time}"))
    # The user types before the booking is done: its closing waits for their next message.
    await chat.typing(True)
    await held_back(chat, batch)
    [closing] = (await durable(stack, chat.session_id)).finals(batch)
    return batch, op, closing


async def test_stale_update_is_not_said_after_the_intent_changed(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    """The 21:00 closing waits for the next turn, and that very turn changes the intent."""
    chat = await open_chat(client)
    place = unique("zalacain")
    old_batch, old, stale = await booked_and_held_back(stack, chat, place, "21:00")
    answer = await chat.say("actually, make it 21:30")
    new_batch, [new] = ids(answer)
    # The reply speaks of the new intent only: the old closing is not in it, nor attached.
    assert "21:00" not in answer["reply"]["text"], answer
    assert f"{place} {DAY} 21:30" in answer["reply"]["text"]
    await chat.typing(False)
    _, closing = await closed_once(stack, chat, new_batch, {new: "committed"})
    assert closing["text"] == f"All done: {place} {DAY} 21:30."
    record = await durable(stack, chat.session_id)
    # Decided before the reply existed, with the gate's reason, and never said.
    assert record.said(stale) == []
    assert record.kinds(Context.DELIVERIES, delivery_id=stale)[-2:] == [
        "delivery.decided", "delivery.superseded",
    ]
    superseded = event_of(record, Context.DELIVERIES, "delivery.superseded", delivery_id=stale)
    assert superseded.reason.startswith(f"stale_superseded: {new} is a newer intent")
    events = await chat.timeline()
    replied = [i for i, e in enumerate(events) if e["type"] == "turn.replied"
               and e.get("response_id") == answer["reply"]["response_id"]]
    assert [list((events[i].get("data") or {}).get("attached_delivery_ids", ()))
            for i in replied] == [[]]
    decided = [i for i, e in enumerate(events)
               if e.get("delivery_id") == stale and e["type"] == "delivery.superseded"]
    assert decided, "the stale closing's fate is not on the timeline"
    assert decided[0] < replied[0], "superseded after the reply"
    # What the user saw: no 21:00 closing anywhere in the history.
    snap = await chat.snapshot()
    assert closings(snap, old_batch) == []
    assert not [m for m in snap["messages"] if f"All done: {place} {DAY} 21:00" in m["text"]]
    assert [d["status"] for d in snap["deliveries"] if d["batch_id"] == old_batch] == [
        "superseded"
    ]
    # Business reality: the 21:00 booking happened, so it is undone by a linked cancel.
    undo = event_of(record, Context.OPERATIONS, "operation.compensated", operation_id=old)
    comp = undo.compensation_operation_id

    async def undone() -> Durable | None:
        found = await durable(stack, chat.session_id)
        return found if found.status(comp) == "committed" else None

    record = await eventually(undone)
    assert record.status(old) == "committed"
    result = event_of(record, Context.OPERATIONS, "operation.committed", operation_id=comp).result
    assert result["status"] == "cancelled"
    entries = await ledger(stack)
    # One real booking per intent, the 21:30 one booked once; no other effect on the place.
    booked = sorted((e["key"], e["effects"]) for e in entries
                    if e["resource"] == place and e["effects"])
    assert booked == sorted([(old, 1), (new, 1)])


async def test_the_same_request_from_two_sessions_of_one_user_is_done_once(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    """A repeat from another session joins the operation and is promised nothing it won't get."""
    user = unique("u")
    chats = [await open_chat(client, user=user), await open_chat(client, user=user)]
    name = unique("notion")
    await fault(stack, match=name, latency_ms=400, times=1)
    text = f"give me access to {name}"
    answers = await asyncio.gather(*(c.say(text) for c in chats))
    [op] = {o["operation_id"] for a in answers for o in a["operations"]}
    records = [await durable(stack, c.session_id) for c in chats]
    admitted_in = [
        i for i, r in enumerate(records)
        if "operation.admitted" in r.kinds(Context.OPERATIONS, operation_id=op)
    ]
    assert len(admitted_in) == 1, "the intent was admitted in both sessions"
    owner, joiner = admitted_in[0], 1 - admitted_in[0]
    # The session that admitted it is promised the result, and gets it exactly once.
    assert "let you know" in answers[owner]["reply"]["text"]
    batch, _ = ids(answers[owner])
    await closed_once(stack, chats[owner], batch, {op: "committed"})
    # The other is told where the result goes, and promised nothing.
    told = answers[joiner]["reply"]["text"]
    assert "another conversation of yours" in told, told
    assert "let you know" not in told
    assert name in told
    # Nothing was owed to, or said in, the joining session, and nothing else was started.
    record = await durable(stack, chats[joiner].session_id)
    assert record.events[Context.OPERATIONS] == []
    assert record.events[Context.BATCHES] == []
    assert record.events[Context.DELIVERIES] == []
    snap = await chats[joiner].snapshot()
    assert snap["deliveries"] == []
    assert [m["text"] for m in snap["messages"] if m["role"] == "assistant"] == [told]
    assert await effects_of(stack, name) == {name: 1}


async def test_an_undo_makes_the_waiting_closing_stale(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    """The "all done" waits for the next turn, and that turn undoes what it reports."""
    chat = await open_chat(client)
    place = unique("horcher")
    batch, op, stale = await booked_and_held_back(stack, chat, place, "20:00")
    answer = await chat.say("undo the booking")
    told = answer["reply"]["text"]
    assert "All done" not in told, told
    assert f"undoing {place}" in told
    undo_batch, [comp] = ids(answer)
    await chat.typing(False)
    record, _ = await closed_once(stack, chat, undo_batch, {comp: "committed"})
    assert record.said(stale) == []
    suppressed = event_of(record, Context.DELIVERIES, "delivery.suppressed", delivery_id=stale)
    assert suppressed.reason == f"needs_reconciliation: {op} is being undone by {comp}"
    snap = await chat.snapshot()
    assert closings(snap, batch) == []
    assert not [m for m in snap["messages"] if f"All done: {place} {DAY} 20:00" in m["text"]]
    # The booking happened once and stays in the record, undone by a linked cancel.
    assert record.status(op) == "committed"
    result = event_of(record, Context.OPERATIONS, "operation.committed", operation_id=comp).result
    assert result["status"] == "cancelled"
    assert await effects_of(stack, place) == {place: 1}


def test_the_running_background_services_yield_the_cpu_and_the_surface_does_not(
    stack: SurfaceStack,
) -> None:
    # Children start at the test runner's own nice value; the increment is relative to it.
    base = os.getpriority(os.PRIO_PROCESS, 0)
    found: dict[str, int] = {}
    for name in ("operation_worker", "batch_coordinator", "delivery_policy", "interaction_surface"):
        proc = stack.procs[name].proc
        assert proc is not None
        found[name] = os.getpriority(os.PRIO_PROCESS, proc.pid) - base
    assert found == {
        "operation_worker": BACKGROUND_NICE,
        "batch_coordinator": BACKGROUND_NICE,
        "delivery_policy": BACKGROUND_NICE,
        "interaction_surface": 0,
    }
