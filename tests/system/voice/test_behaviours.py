"""Seed-002 voice behaviours on a real call: false interruptions, DTMF, results that arrive
while the caller speaks or while the agent is speaking, urgent versus normal."""

from __future__ import annotations

import random
import struct
import time
from typing import Any

import httpx

from services.interaction_surface.voice.codec import pcm16_to_ulaw, silence_ulaw
from testkit.phone import speech
from testkit.surface import Chat, SurfaceStack, eventually, fault, open_chat
from testkit.voice import (
    SPOKEN_RESOURCES,
    ask_by_voice_with_a_slow_provider,
    call_in,
    delivery_with,
    events_of,
    heard,
    ledger,
    metric,
    unique,
)


def noise_burst(ms: int, *, seed: int = 3) -> bytes:
    """A cough-like burst: loud broadband noise, voiced for the VAD, with no words in it."""
    rng = random.Random(seed)
    samples = [max(-32000, min(32000, int(rng.gauss(0, 4000)))) for _ in range(ms * 8)]
    return pcm16_to_ulaw(struct.pack(f"<{len(samples)}h", *samples))


async def delivery(chat: Chat, delivery_id: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        d for d in (await chat.snapshot())["deliveries"] if d["delivery_id"] == delivery_id
    )
    return found


async def test_a_cough_over_the_closing_holds_it_briefly_and_nothing_is_cut(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat)
    name = unique("voicecough")
    await chat.say(f"give me access to {name}")
    sent = await eventually(lambda: delivery_with(chat, "sent"), timeout_s=20)
    delivery_id = sent["delivery_id"]
    # 0.5 s into the closing.
    await phone.wait_playing(500)
    # Loud and longer than the 60 ms minimum: webrtcvad calls it voiced, Silero does not.
    await phone.talk(noise_burst(300) + silence_ulaw(500))
    closing = await phone.wait_for(delivery_id, timeout_s=20, returned=True)
    assert not phone.clears
    assert not closing.flushed
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=15)
    assert spoken["delivery_id"] == delivery_id
    # Durable truth: no barge-in, one playback, heard whole; the closing is in history once.
    assert not await events_of(chat, "control.barge_in")
    finished = await events_of(chat, "playback.finished", delivery_id=delivery_id)
    assert [e["data"]["heard"] for e in finished] == [True]
    assert not await events_of(chat, "speech.started")
    turns = await events_of(chat, "turn.received")
    assert [t["data"]["channel"] for t in turns] == ["chat"]
    messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    assert [m["text"] for m in messages] == [sent["text"]]
    assert await ledger(stack, name) == 1
    await phone.hang_up()


async def test_dtmf_answers_a_confirmation_and_digits_become_a_turn(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    account = unique("acct-")
    await chat.say(f"send 50 euros to {account}")
    operations = (await chat.snapshot())["operations"]
    assert [o["status"] for o in operations] == ["awaiting_confirmation"]
    # A slow transfer: its (urgent) closing must not race the reply to the key press, which
    # is sent at the pace it plays (about 6 s).
    await fault(stack, match=account, latency_ms=9000, times=1)
    phone = await call_in(stack.url, chat, speed=4.0)
    before = await metric(client, "holdline_telephony_frames_rejected_total", reason="bad_dtmf")
    await phone.send({"event": "dtmf", "streamSid": phone.stream_sid, "dtmf": {"digit": "x"}})
    await phone.press("1")

    async def committed() -> list[dict[str, Any]] | None:
        ops = (await chat.snapshot())["operations"]
        return ops if [o["status"] for o in ops] == ["committed"] else None

    await eventually(committed, timeout_s=20)
    turns = await events_of(chat, "turn.received")
    assert [(t["data"]["channel"], t["data"]["text"]) for t in turns[1:]] == [("voice", "yes")]
    assert turns[1]["data"]["client_turn_id"] == f"dtmf-call_{phone.call_sid}-1"
    confirmed = await events_of(chat, "operation.confirmed")
    assert len(confirmed) == 1
    assert confirmed[0]["turn_id"] == turns[1]["turn_id"]
    # The reply to the key press is spoken on the call.
    reply = await eventually(lambda: events_of(chat, "turn.replied", turn_id=turns[1]["turn_id"]))
    await phone.wait_for(reply[0]["response_id"], returned=True)
    # Without a pending confirmation, digits are an entry ended by `#`.
    await phone.press("42#")

    async def entry() -> list[dict[str, Any]] | None:
        found = await events_of(chat, "turn.received")
        return found if len(found) == 3 else None

    typed = (await eventually(entry))[2]["data"]
    assert (typed["channel"], typed["text"]) == ("voice", "42")
    assert typed["client_turn_id"] == f"dtmf-call_{phone.call_sid}-2"
    assert await metric(
        client, "holdline_telephony_frames_rejected_total", reason="bad_dtmf"
    ) == before + 1
    assert await ledger(stack, account) == 1
    await phone.hang_up()


async def test_while_the_caller_speaks_a_normal_result_waits_and_an_urgent_one_cuts_in(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    account, name = unique("acct-"), unique("voicewait")
    for resource in (account, name):
        await fault(stack, match=resource, latency_ms=1200, times=1)
    await chat.say(f"send 50 euros to {account}")
    phone = await call_in(stack.url, chat, speed=4.0)
    await chat.say("yes")
    await chat.say(f"give me access to {name}")
    # Both tools finish while the caller is talking (real speech, real-time pace).
    talking = await speech(
        "I am still looking for the reference of my order, it should be in this drawer,"
        " give me a second while I find the paper, I think it is the blue one",
        tail_silence_ms=0,
    )
    spoke_from = time.monotonic()
    await phone.talk(talking)
    spoke_until = time.monotonic()
    await phone.talk(silence_ulaw(1500))
    snapshot = await chat.snapshot()
    finals = {d["priority"]: d for d in snapshot["deliveries"] if d["kind"] == "final"}
    assert set(finals) == {"urgent", "normal"}
    urgent, normal = finals["urgent"]["delivery_id"], finals["normal"]["delivery_id"]
    # The urgent result was said over the caller, the normal one waited for quiet.
    urgent_heard = await heard(phone, chat, urgent)
    assert urgent_heard.began_at is not None
    assert spoke_from < urgent_heard.began_at < spoke_until
    normal_heard = await heard(phone, chat, normal)
    assert normal_heard.began_at is not None
    assert normal_heard.began_at > spoke_until
    for utterance in phone.utterances:
        if utterance is not urgent_heard and utterance.began_at is not None:
            assert not spoke_from < utterance.began_at < spoke_until, utterance
    urgent_decisions = await events_of(chat, "delivery.decided", delivery_id=urgent)
    assert urgent_decisions[0]["data"]["decision"] == "interrupt"
    waits = await events_of(chat, "delivery.decided", delivery_id=normal)
    assert waits[0]["data"]["decision"] == "wait_for_quiet"
    for state in (
        await eventually(lambda: _closed(chat, urgent), timeout_s=20),
        await eventually(lambda: _closed(chat, normal), timeout_s=20),
    ):
        # The wait accepts either closed status; on a live call both were played to the end,
        # so the record must say `spoken` (playback confirmed by marks), not `delivered`.
        assert state["status"] == "spoken", state
    messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    assert sorted(m["delivery_id"] for m in messages) == sorted((urgent, normal))
    assert await ledger(stack, account) == 1
    assert await ledger(stack, name) == 1
    await phone.hang_up()


async def _closed(chat: Chat, delivery_id: str) -> dict[str, Any] | None:
    state = await delivery(chat, delivery_id)
    return state if state["status"] in ("spoken", "delivered") else None


async def test_a_result_during_the_agents_playback_is_said_after_it(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat)
    # The acceptance plays for seconds; the accesses commit (a little slowly) while it does.
    await ask_by_voice_with_a_slow_provider(stack, phone)
    reply = await eventually(lambda: events_of(chat, "turn.replied"), timeout_s=20)
    acceptance = await phone.wait_for(reply[0]["response_id"], timeout_s=20, returned=True)
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=25)
    closing = await heard(phone, chat, spoken["delivery_id"])
    assert closing.mark == spoken["delivery_id"]
    decisions = await events_of(chat, "delivery.decided", delivery_id=spoken["delivery_id"])
    assert "after_playback" in [d["data"]["decision"] for d in decisions]
    # Not cut, not cleared: the closing started after the acceptance had played out.
    assert not phone.clears
    assert not acceptance.flushed
    assert acceptance.returned_at is not None
    assert closing.began_at is not None
    assert closing.began_at >= acceptance.returned_at
    finished = await events_of(chat, "playback.finished")
    assert [e["data"]["heard"] for e in finished] == [True, True]
    messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    assert [m["delivery_id"] for m in messages] == [spoken["delivery_id"]]
    for name in SPOKEN_RESOURCES:
        assert await ledger(stack, name) == 1
    await phone.hang_up()
