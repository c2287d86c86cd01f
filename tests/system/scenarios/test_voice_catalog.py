"""Seed 002's other seven scenarios on a phone call: the ones `test_conversation` runs on chat.

Real speech in (espeak-ng, μ-law in 20 ms frames over the Twilio protocol), real audio out,
marks returned as the phone plays them. Where the caller's words matter (a spoken request,
a spoken cancel) they are said; where only their timing matters (the caller talking over a
result) the request is typed in the same session and the caller's speech carries the timing.
Each asserts, through `checks`, the durable record, the provider's ledger, one final delivery
said once, causal order, and what the caller heard. Apart from `test_voice` because it is a
system of its own: callbacks sent twice, the default mock model, one restart of two services.
About 400 lines: seven scenarios and the few call probes only they use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed

from libs.bus import Context
from services.interaction_surface.voice.codec import pcm16_to_ulaw, silence_ulaw, ulaw_to_pcm16
from testkit.phone import Phone, Utterance, speech
from testkit.processes import Broker
from testkit.stimuli import at_level, hiss, speech_level
from testkit.surface import Chat, SurfaceStack, closings, eventually, fault, open_chat, unique

from .checks import (
    Durable,
    callbacks_delivered,
    closed_once,
    durable,
    effects_of,
    event_of,
    heard_once,
    held_back,
    ids,
    in_order,
    ledger,
    tag,
    timeline,
    voice_batch,
)
from .stacks import PHONE_ENV, running

DAY = "2026-12-24"
# Said over the work, at real-time pace: words the domain LM knows and the mock model
# hears as "wait", so the turn they become asks for nothing. About four seconds long.
HOLDING_ON = "wait one moment please, hold on, one moment, hold on"
# About six seconds: long enough to cover a result and a typed turn after it.
HOLDING_ON_LONGER = "wait one moment please, hold on, one moment, wait one moment please, hold on"


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Signed Twilio streams, short endpointing, bookings whose callback comes twice."""
    yield from running(
        broker,
        tmp_path_factory,
        {
            **PHONE_ENV,
            "HOLDLINE_SANDBOX_CALLBACK_TWICE": "1",
            # No cut is part of these scenarios: the agent's audio goes out whole and the
            # phone plays it four times faster (a clear would still flush it, and show).
            "HOLDLINE_PLAYOUT_LEAD_MS": "0",
            # A call whose surface died is found dead (and its end recorded) within seconds.
            "HOLDLINE_CALL_OWNER_TTL_S": "3",
        },
    )


async def dial(stack: SurfaceStack, chat: Chat, **options: Any) -> Phone:
    """A call continuing the chat's session, played back at four times the pace."""
    options.setdefault("speed", 4.0)
    phone = Phone(stack.url, {"session_id": chat.session_id, "token": chat.token}, **options)
    await phone.dial()
    return phone


def on_a_line(ulaw: bytes, seed: int) -> bytes:
    """Speech with a phone line's hiss under it, 30 dB below it (seeded: the same every run)."""
    level = speech_level(ulaw)
    noise = ulaw_to_pcm16(at_level(hiss(seed=seed, ms=len(ulaw) // 8), level / 31.6))
    voice = ulaw_to_pcm16(ulaw)
    mixed = bytearray()
    for i in range(0, min(len(voice), len(noise)) - 1, 2):
        total = int.from_bytes(voice[i : i + 2], "little", signed=True) + int.from_bytes(
            noise[i : i + 2], "little", signed=True
        )
        mixed += max(-32767, min(32767, total)).to_bytes(2, "little", signed=True)
    return pcm16_to_ulaw(bytes(mixed))


async def holding_on(phone: Phone, seed: int, text: str = HOLDING_ON) -> tuple[float, float]:
    """The caller talks for a while at real-time pace; (from, until) on the phone's clock."""
    talking = on_a_line(await speech(text, tail_silence_ms=0), seed)
    spoke_from = time.monotonic()
    await phone.talk(talking)
    spoke_until = time.monotonic()
    await phone.talk(silence_ulaw(600))
    return spoke_from, spoke_until


async def confirm_if_asked(phone: Phone, chat: Chat, resource: str) -> None:
    """Until the spoken request for `resource` is admitted; when the recognizer was unsure
    and the agent asks "did you say ...?", the caller presses 1 while it asks."""

    async def admitted_or_asked() -> str | None:
        if any(o["label"] == resource for o in (await chat.snapshot())["operations"]):
            return "admitted"
        asked = [e for e in await timeline(chat) if e["type"] == "turn.replied"
                 and e["data"]["text"].startswith("Did you say")]
        return "asked" if asked else None

    if await eventually(admitted_or_asked, timeout_s=20) == "asked":
        await phone.press("1")


def utterance_of(phone: Phone, delivery_id: str) -> Utterance:
    """The one utterance of the delivery's own audio the phone received and played whole."""
    own = [u for u in phone.utterances if u.mark.startswith(delivery_id)]
    assert len(own) == 1, own
    assert own[0].returned_at is not None
    assert not own[0].flushed
    return own[0]


def never_played(events: list[dict[str, Any]], phone: Phone, delivery_id: str) -> None:
    """No audio of the delivery went out: no playback recorded, no mark at the phone."""
    assert not [e for e in events if e["type"] == "playback.started"
                and e.get("delivery_id") == delivery_id]
    assert not [u for u in phone.utterances if u.mark.startswith(delivery_id)]


def decisions_of(record: Durable, delivery_id: str) -> list[str]:
    """The policy's decisions on one delivery, in order."""
    return [
        i.envelope.event.decision for i in record.events[Context.DELIVERIES]
        if tag(i) == "delivery.decided" and i.envelope.delivery_id == delivery_id
    ]


async def test_tool_finishes_while_the_user_is_still_speaking(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    name = unique("trello")
    await fault(stack, match=name, latency_ms=1500, times=1)
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    # The caller talks for about four seconds; the provider answers after 1.5.
    spoke_from, spoke_until = await holding_on(phone, seed=11)
    record, closing = await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    delivery_id = closing["delivery_id"]
    # Said on its own once the caller stopped, or riding on the reply to what they said.
    assert f"All done: {name}." in closing["text"]
    assert decisions_of(record, delivery_id)[0] == "wait_for_quiet"
    events = await timeline(chat)
    kinds = [e["type"] for e in events]
    started = kinds.index("speech.started")
    committed = kinds.index("operation.committed")
    stopped = kinds.index("speech.stopped", started)
    # Committed while the caller talked; not a word of the closing over them.
    assert started < committed < stopped
    assert "control.barge_in" not in kinds
    await heard_once(phone, chat, delivery_id)
    for utterance in phone.utterances:
        assert utterance.began_at is not None
        assert not spoke_from < utterance.began_at < spoke_until, utterance
    assert await effects_of(stack, name) == {name: 1}
    await phone.hang_up()


async def test_two_tools_of_the_same_batch_finish_in_reverse_order(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    # Spoken: names the domain LM knows, each asked for once in this module.
    slow, fast = "okta", "asana"
    await fault(stack, match=slow, latency_ms=1500, times=1)
    await phone.talk(await speech(f"give me access to {slow} and {fast}"), realtime=False)
    await confirm_if_asked(phone, chat, slow)
    batch, first = await voice_batch(chat, slow)
    _, second = await voice_batch(chat, fast)
    record, closing = await closed_once(
        stack, chat, batch, {first: "committed", second: "committed"}, said_as="spoken"
    )
    assert closing["text"] == f"All done: {slow} and {fast}."
    closing_events = [i.envelope.event for i in record.events[Context.BATCHES]
                      if tag(i) == "batch.drained" and i.envelope.batch_id == batch]
    assert len(closing_events) == 1
    # Every member once, in the order they committed: the fast one first.
    settled = [m.operation_id for m in closing_events[0].settled]  # type: ignore[union-attr]
    assert settled == [second, first]
    assert record.kinds(Context.BATCHES, batch_id=batch) == ["batch.opened", "batch.drained"]
    events = await timeline(chat)
    where = [(e["type"], e.get("operation_id"), e.get("delivery_id")) for e in events]
    # One closing for both, played only after the slower one, the first asked for, ended.
    assert where.index(("operation.committed", second, None)) < where.index(
        ("operation.committed", first, None)
    ) < where.index(("playback.started", None, closing["delivery_id"]))
    # Asked for on the call once; when the recognizer was unsure, the 1 ran it as heard.
    turns = [t for t in events if t["type"] == "turn.received"]
    request = f"give me access to {slow} and {fast}"
    assert [(t["data"]["channel"], t["data"]["text"]) for t in turns][:2] in (
        [("voice", request)], [("voice", request), ("voice", request)],
    ), turns
    assert [t["data"]["client_turn_id"] for t in turns[1:]] in (
        [], [f"heard-call_{phone.call_sid}-1"],
    )
    assert len([o for o in (await chat.snapshot())["operations"] if o["label"] == slow]) == 1
    utterance_of(phone, closing["delivery_id"])
    assert await effects_of(stack, slow, fast) == {slow: 1, fast: 1}
    await phone.hang_up()


async def test_a_callback_arrives_twice(client: httpx.AsyncClient, stack: SurfaceStack) -> None:
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    place = unique("casa")
    before = await callbacks_delivered(stack)
    batch, [op] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 21:00"))

    async def both_callbacks() -> bool:
        return await callbacks_delivered(stack) >= before + 2

    # The provider completes asynchronously and calls back twice with the same result.
    await eventually(both_callbacks)
    record, closing = await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    assert place in closing["text"]
    kinds = record.kinds(Context.OPERATIONS, operation_id=op)
    assert kinds.count("operation.committed") == 1
    in_order(kinds, "operation.admitted", "operation.started", "operation.committed")
    # Said on the call once: one playback of it, heard whole, one message in history.
    played = [e for e in await timeline(chat, delivery_id=closing["delivery_id"])
              if e["type"] == "playback.finished"]
    assert [e["data"]["heard"] for e in played] == [True]
    utterance_of(phone, closing["delivery_id"])
    assert await effects_of(stack, place) == {place: 1}
    await phone.hang_up()


async def test_user_explicitly_cancels_an_operation(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    place = unique("botin")
    # Long enough for the caller to say it, and be understood, while the provider works.
    await fault(stack, match=place, latency_ms=3000, times=1)
    batch, [op] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 14:00"))

    async def started() -> bool:
        record = await durable(stack, chat.session_id)
        return "operation.started" in record.kinds(Context.OPERATIONS, operation_id=op)

    await eventually(started, every_s=0.05)
    await phone.talk(await speech("cancel the booking"), realtime=False)
    record, closing = await closed_once(stack, chat, batch, {op: "cancelled"}, said_as="spoken")
    assert closing["text"].startswith("Cancelled as you asked")
    in_order(record.kinds(Context.OPERATIONS, operation_id=op),
             "operation.started", "operation.cancel_requested", "operation.cancelled")
    events = await timeline(chat)
    [spoken] = [e for e in events if e["type"] == "turn.received"
                and e["data"]["channel"] == "voice"]
    assert spoken["data"]["text"] == "cancel the booking"
    # The cancel came from what the caller said, and the caller heard how it ended.
    [asked] = [e for e in events if e["type"] == "operation.cancel_requested"]
    assert asked["turn_id"] == spoken["turn_id"]
    await heard_once(phone, chat, closing["delivery_id"])
    assert await effects_of(stack, place) == {place: 0}
    await phone.hang_up()


async def test_a_new_intent_makes_an_earlier_update_stale(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    """The 21:00 closing waits while the caller talks; the intent changes before it is said."""
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    place = unique("zalacain")
    await fault(stack, match=place, latency_ms=800, times=1)
    old_batch, [old] = ids(await chat.say(f"book a table for two at {place} on {DAY} at 21:00"))
    talking = asyncio.create_task(holding_on(phone, seed=12, text=HOLDING_ON_LONGER))
    await held_back(chat, old_batch)
    [stale] = (await durable(stack, chat.session_id)).finals(old_batch)
    # Typed in the same session while the caller is still talking on the call.
    new_batch, [new] = ids(await chat.say("actually, make it 21:30"))
    await talking
    record, closing = await closed_once(
        stack, chat, new_batch, {new: "committed"}, said_as="spoken"
    )
    assert f"All done: {place} {DAY} 21:30." in closing["text"]
    assert record.said(stale) == []
    assert record.kinds(Context.DELIVERIES, delivery_id=stale)[-1] == "delivery.superseded"
    superseded = event_of(record, Context.DELIVERIES, "delivery.superseded", delivery_id=stale)
    assert superseded.reason.startswith(f"stale_superseded: {new} is a newer intent")
    # What the caller heard: the 21:30 closing, whole, and nothing of the 21:00 one.
    events = await timeline(chat)
    never_played(events, phone, stale)
    await heard_once(phone, chat, closing["delivery_id"])
    snap = await chat.snapshot()
    assert closings(snap, old_batch) == []
    assert not [m for m in snap["messages"] if f"{DAY} 21:00" in m["text"]
                and m["role"] == "assistant" and m["delivery_id"]]
    # Business reality: the 21:00 booking happened, so a linked cancel undoes it.
    undo = event_of(record, Context.OPERATIONS, "operation.compensated", operation_id=old)

    async def undone() -> Durable | None:
        found = await durable(stack, chat.session_id)
        return found if found.status(undo.compensation_operation_id) == "committed" else None

    await eventually(undone)
    # One real booking per intent, each once; the undo is the cancel linked to the first.
    booked = sorted((e["key"], e["effects"]) for e in await ledger(stack)
                    if e["resource"] == place and e["effects"])
    assert booked == sorted([(old, 1), (new, 1)])
    await phone.hang_up()


async def test_an_urgent_result_interrupts_and_a_normal_one_waits(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    name, account = unique("jira"), unique("eve")
    # Results a little later than the turns, each within one attempt's timeout (1 s here)
    # or, for the access, reconciled after it: both land while the caller talks.
    await fault(stack, match=name, latency_ms=1500, times=1)
    await fault(stack, match=f"{account}*", latency_ms=600, status=403, times=1)
    urgent, [transfer] = ids(await chat.say(f"send 70 euros to {account}"))
    normal, [access] = ids(await chat.say(f"give me access to {name}"))
    await chat.say("yes")
    spoke_from, spoke_until = await holding_on(phone, seed=13)
    # Both checked at once: their quiet windows overlap.
    (_, told), (record, _) = await asyncio.gather(
        closed_once(stack, chat, urgent, {transfer: "failed_final"}, said_as="spoken"),
        closed_once(stack, chat, normal, {access: "committed"}, said_as="spoken"),
    )
    assert account in told["text"]
    [interrupting] = record.finals(urgent)
    [waiting] = record.finals(normal)
    assert decisions_of(record, interrupting)[0] == "interrupt"
    # The normal one waited for the caller (and for the urgent one's playback, if it came
    # while that played); it never cut in.
    assert "wait_for_quiet" in decisions_of(record, waiting)
    assert "interrupt" not in decisions_of(record, waiting)
    # What the caller heard: the urgent one over their own voice, the normal one after.
    loud = utterance_of(phone, interrupting)
    assert loud.began_at is not None
    assert spoke_from < loud.began_at < spoke_until
    await heard_once(phone, chat, waiting)
    for utterance in phone.utterances:
        if utterance is not loud:
            assert utterance.began_at is not None
            assert not spoke_from < utterance.began_at < spoke_until, utterance
    assert await effects_of(stack, name, account) == {name: 1, account: 0}
    await phone.hang_up()


async def test_process_restarts_after_the_effect_and_before_the_follow_up(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    """Last of the module: it kills the surface and the policy (the call with them)."""
    chat = await open_chat(client)
    phone = await dial(stack, chat)
    name = unique("zendesk")
    await fault(stack, match=name, latency_ms=800, times=1)
    batch, [op] = ids(await chat.say(f"give me access to {name}"))
    talking = asyncio.create_task(holding_on(phone, seed=14))
    roles = ("delivery_policy", "interaction_surface")
    try:
        # The effect is real and its closing waits for the caller to stop talking.
        await held_back(chat, batch)
        assert await effects_of(stack, name) == {name: 1}
        for role in roles:
            stack.procs[role].kill9()
    finally:
        with contextlib.suppress(ConnectionClosed):
            await talking
        await phone.hang_up(stop=False)
    for role in roles:
        stack.procs[role].start(wait_ready=False)
    for role in roles:
        await asyncio.to_thread(stack.procs[role].wait_ready, 60)
    [owed] = (await durable(stack, chat.session_id)).finals(batch)
    never_played(await timeline(chat), phone, owed)
    # The caller calls back and says nothing: the restarted surface recorded the dead call's
    # end (so no caller is left speaking on it), and the owed closing comes on its own.
    again = await dial(stack, chat)
    record, closing = await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    assert f"All done: {name}." in closing["text"]
    in_order(record.kinds(Context.DELIVERIES, batch_id=batch),
             "delivery.ready", "delivery.decided", "delivery.spoken")
    await heard_once(again, chat, closing["delivery_id"])
    assert not [u for u in again.utterances if u.flushed]
    assert await effects_of(stack, name) == {name: 1}
    await again.hang_up()
