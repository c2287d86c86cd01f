"""Seed scenarios on a phone call: real speech in, real audio out, Twilio marks as the truth."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from libs.bus import Context
from services.interaction_surface.voice.codec import silence_ulaw
from testkit.drained import settled
from testkit.phone import CUT, Phone, speech
from testkit.processes import Broker
from testkit.surface import SurfaceStack, eventually, fault, open_chat, unique

from .checks import (
    closed_once,
    durable,
    effects_of,
    final_said,
    heard_once,
    ids,
    in_order,
    marks_of,
    timeline,
    voice_batch,
)
from .stacks import PHONE_ENV, running

# Past the end of an utterance's playback, when a test shows it was not taken as played.
PLAYOUT_MARGIN_S = 0.5


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Signed Twilio streams, short endpointing, and a model that is slow about notion."""
    yield from running(
        broker,
        tmp_path_factory,
        {
            **PHONE_ENV,
        },
        {
            "HOLDLINE_MODEL_MODULES": "tests.system.scenarios.slow_model",
            "HOLDLINE_MODEL": "ponderous",
        },
    )


def params(chat: Any) -> dict[str, str]:
    """customParameters continuing a chat session on the call."""
    return {"session_id": chat.session_id, "token": chat.token}


async def test_barge_in_before_admitted(client: httpx.AsyncClient, stack: SurfaceStack) -> None:
    chat = await open_chat(client)
    phone = Phone(stack.url, params(chat), speed=4.0)
    await phone.dial()
    # The request, then the caller speaks again while the model is still thinking.
    await phone.talk(await speech("give me access to notion"), realtime=False)
    await phone.talk(await speech("wait one moment please"))
    batch, op = await voice_batch(chat, "notion")
    delivery = await final_said(chat, batch, "spoken")
    await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    events = await timeline(chat)
    kinds = [e["type"] for e in events]
    in_order(kinds, "control.barge_in", "operation.admitted", "operation.committed",
             "delivery.spoken")
    assert "operation.cancel_requested" not in kinds
    # The reply to the request was never played: history keeps nothing of it.
    [cut] = [e for e in events if e["type"] == "reply.truncated"]
    assert cut["data"]["text"] == ""
    kept = [m["text"] for m in (await chat.snapshot())["messages"]
            if m["turn_id"] == cut["turn_id"] and m["role"] == "assistant"
            and not m["delivery_id"]]
    assert kept in ([], [""])
    await heard_once(phone, chat, delivery["delivery_id"])
    assert await effects_of(stack, "notion") == {"notion": 1}
    await phone.hang_up()


async def test_barge_in_after_running(client: httpx.AsyncClient, stack: SurfaceStack) -> None:
    chat = await open_chat(client)
    phone = Phone(stack.url, params(chat))
    await phone.dial()
    slow, fast = unique("vault"), unique("wiki")
    # Long enough that the caller's barge-in lands while it runs, even on a loaded machine.
    await fault(stack, match=slow, latency_ms=3000, times=1)
    busy, [running_op] = ids(await chat.say(f"give me access to {slow}"))

    async def started() -> bool:
        record = await durable(stack, chat.session_id)
        return "operation.started" in record.kinds(Context.OPERATIONS, operation_id=running_op)

    await eventually(started, every_s=0.05)
    spoken, [fast_op] = ids(await chat.say(f"give me access to {fast}"))
    # The agent speaks the other closing while the provider works; the caller talks over it.
    await phone.wait_audio()
    await phone.talk(await speech("hold on"))
    assert phone.clears
    await closed_once(stack, chat, busy, {running_op: "committed"}, said_as="spoken")
    await closed_once(stack, chat, spoken, {fast_op: "committed"}, said_as="spoken")
    kinds = [e["type"] for e in await timeline(chat, operation_id=running_op)]
    assert "operation.cancel_requested" not in kinds
    everything = [(e["type"], e.get("operation_id")) for e in await timeline(chat)]
    started_at = everything.index(("operation.started", running_op))
    barge_at = next(i for i, (k, _) in enumerate(everything) if k == "control.barge_in")
    committed_at = everything.index(("operation.committed", running_op))
    assert started_at < barge_at < committed_at
    diagnosis = (await client.get(
        f"/v1/sessions/{chat.session_id}/timeline", headers=chat.auth
    )).json()["diagnosis"]
    # The operation running at the barge-in went on to commit.
    assert (running_op, "committed") in [
        (a["operation_id"], a["status"]) for a in diagnosis["after_barge_in"]
    ]
    for batch in (busy, spoken):
        await heard_once(phone, chat, (await final_said(chat, batch, "spoken"))["delivery_id"])
    assert await effects_of(stack, slow, fast) == {slow: 1, fast: 1}
    await phone.hang_up()


async def test_tool_finishes_during_playback(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = Phone(stack.url, params(chat))
    await phone.dial()
    first, second = unique("voicegit"), unique("voicewiki")
    playing, [first_op] = ids(await chat.say(f"give me access to {first}"))
    await phone.wait_audio()
    # The first closing is playing when the second tool finishes.
    later, [second_op] = ids(await chat.say(f"give me access to {second}"))
    await closed_once(stack, chat, later, {second_op: "committed"}, said_as="spoken")
    await closed_once(stack, chat, playing, {first_op: "committed"}, said_as="spoken")
    first_id = (await final_said(chat, playing, "spoken"))["delivery_id"]
    second_id = (await final_said(chat, later, "spoken"))["delivery_id"]
    events = await timeline(chat)
    where = [(e["type"], e.get("delivery_id"), e.get("operation_id")) for e in events]
    first_done = where.index(("playback.finished", first_id, None))
    committed = next(i for i, w in enumerate(where)
                     if w[0] == "operation.committed" and w[2] == second_op)
    second_starts = where.index(("playback.started", second_id, None))
    # Committed during the first playback; said only once it finished, nothing cut.
    assert committed < first_done < second_starts
    assert not phone.clears
    await heard_once(phone, chat, first_id)
    await heard_once(phone, chat, second_id)
    assert await effects_of(stack, first, second) == {first: 1, second: 1}
    await phone.hang_up()


async def test_user_interrupts_before_hearing_the_closing(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = Phone(stack.url, params(chat))
    await phone.dial()
    answer = await chat.say("give me access to jira")
    batch, op = answer["operations"][0]["batch_id"], answer["operations"][0]["operation_id"]
    # Cut in 0.3 s into the closing.
    await phone.wait_playing(300)
    await phone.talk(await speech("wait"))
    assert phone.clears
    delivery = await final_said(chat, batch, "spoken")
    record, _ = await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    kinds = record.kinds(Context.DELIVERIES, delivery_id=delivery["delivery_id"])
    in_order(kinds, "delivery.sent", "delivery.unheard", "delivery.spoken")
    assert kinds.count("delivery.spoken") == 1
    marks = marks_of(await timeline(chat), delivery["delivery_id"])
    assert len(marks) >= 2
    # Sent at the pace it plays, the first closing was cut before its mark went out.
    assert [u.mark for u in phone.utterances if u.flushed] == [CUT]
    await heard_once(phone, chat, delivery["delivery_id"])
    assert await effects_of(stack, "jira") == {"jira": 1}
    await phone.hang_up()


async def test_channel_disconnects_with_pending_deliveries(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    call = Phone(stack.url, params(chat))
    await call.dial()
    answer = await chat.say("give me access to confluence")
    batch, op = answer["operations"][0]["batch_id"], answer["operations"][0]["operation_id"]
    # The line drops while the closing is playing, 0.3 s into it.
    await call.wait_playing(300)
    await call.hang_up(stop=False)

    async def unheard() -> bool:
        record = await durable(stack, chat.session_id)
        return "delivery.unheard" in record.kinds(Context.DELIVERIES, batch_id=batch)

    await eventually(unheard)
    assert not [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    again = Phone(stack.url, params(chat), speed=4.0)
    await again.dial()
    delivery = await final_said(chat, batch, "spoken")
    record, _ = await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    kinds = record.kinds(Context.DELIVERIES, delivery_id=delivery["delivery_id"])
    in_order(kinds, "delivery.sent", "delivery.unheard", "delivery.spoken")
    await heard_once(again, chat, delivery["delivery_id"])
    assert await effects_of(stack, "confluence") == {"confluence": 1}
    await again.hang_up()


async def test_tts_generated_audio_twilio_has_not_played(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = Phone(stack.url, params(chat), play=False)
    await phone.dial()
    answer = await chat.say("give me access to dropbox")
    batch, op = answer["operations"][0]["batch_id"], answer["operations"][0]["operation_id"]
    sent = await final_said(chat, batch, "sent")
    utterance = await phone.wait_for(sent["delivery_id"])
    # All its audio reached Twilio; none of it has played yet.
    assert utterance.audio_ms > 500
    # Longer than the audio would take to play from its first frame (a surface guessing
    # "played" from the audio's length would have marked it by then), then every service
    # has handled what is on the streams: still no mark, so still not said.
    assert utterance.began_at is not None
    played_by = utterance.began_at + utterance.audio_ms / 1000 + PLAYOUT_MARGIN_S
    await asyncio.sleep(max(played_by - time.monotonic(), 0.0))
    await settled(stack)
    snap = await chat.snapshot()
    [still] = [d for d in snap["deliveries"] if d["delivery_id"] == sent["delivery_id"]]
    assert still["status"] == "sent"
    assert not [m for m in snap["messages"] if m["delivery_id"] == sent["delivery_id"]]
    record = await durable(stack, chat.session_id)
    assert record.said(sent["delivery_id"]) == []
    # Twilio reports it played.
    await phone.send({"event": "mark", "streamSid": phone.stream_sid,
                      "mark": {"name": sent["delivery_id"]}})
    await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    assert await effects_of(stack, "dropbox") == {"dropbox": 1}
    await phone.hang_up()


async def test_vad_fires_a_false_speech_started(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_chat(client)
    phone = Phone(stack.url, params(chat))
    await phone.dial()
    answer = await chat.say("give me access to docker")
    batch, op = answer["operations"][0]["batch_id"], answer["operations"][0]["operation_id"]
    await phone.wait_playing(300)
    # A burst of noise (seeded: the same every run): loud enough for webrtcvad to call it
    # voice, with no words in it.
    noise = bytes(b & 0x7F for b in random.Random(7).randbytes(2400))
    await phone.talk(noise + silence_ulaw(1200))
    delivery = await final_said(chat, batch, "spoken")
    record, closing = await closed_once(stack, chat, batch, {op: "committed"}, said_as="spoken")
    events = await timeline(chat)
    kinds = [e["type"] for e in events]
    # The speech detector held the audio, found no speech and let it go on: no cut, no
    # turn, and the closing was heard whole, once, from its own single mark.
    assert "control.barge_in" not in kinds
    assert "speech.started" not in kinds
    assert not phone.clears
    said = record.kinds(Context.DELIVERIES, delivery_id=delivery["delivery_id"])
    assert "delivery.unheard" not in said
    assert said.count("delivery.spoken") == 1
    [whole] = [u for u in phone.utterances if u.mark.startswith(delivery["delivery_id"])]
    assert whole.returned_at is not None
    assert not whole.flushed
    assert closing["text"] == "All done: docker."
    assert await effects_of(stack, "docker") == {"docker": 1}
    await phone.hang_up()
