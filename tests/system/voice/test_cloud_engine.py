"""A phone call through every service on the cloud speech engines, against the fake vendor
of tests/unit/voice."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.fake_cloud_speech import ASK, FakeDeepgram, fake
from testkit.phone import AUTH_TOKEN, Phone, speech
from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, effects, eventually, open_chat, unique

__all__ = ["fake"]  # the fixture, from testkit


@pytest.mark.timeout(90)
async def test_a_call_on_cloud_engines_admits_a_tool_call_and_hears_it(
    broker: Broker, tmp_path: Path, fake: FakeDeepgram
) -> None:
    stack = SurfaceStack(
        nats_url=broker.url,
        prefix=f"dg{uuid.uuid4().hex[:10]}",
        logs=tmp_path,
        env={"TWILIO_AUTH_TOKEN": AUTH_TOKEN, "HOLDLINE_VAD_ENDPOINT_MS": "500",
             "HOLDLINE_DELIVERY_WINDOW_MS": "20000"},
        surface_env={
            "HOLDLINE_STT": "deepgram", "HOLDLINE_TTS": "deepgram",
            "DEEPGRAM_API_KEY": fake.api_key, "HOLDLINE_DEEPGRAM_URL": fake.url,
            "HOLDLINE_DEEPGRAM_ENDPOINTING_MS": "300",
        },
    )
    # Start-up blocks; the fake answers on this loop meanwhile (the surface calls it then).
    await asyncio.to_thread(stack.start)
    try:
        await converse(stack, fake)
    finally:
        stack.stop()


async def converse(stack: SurfaceStack, fake: FakeDeepgram) -> None:
    """Say a request the offline recogniser could never spell; hear the acceptance."""
    name = unique("cloudgit")
    said = f"give me access to {name}"
    fake.prime(said)
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        chat = await open_chat(client)
        phone = Phone(stack.url, {"session_id": chat.session_id, "token": chat.token}, speed=4.0)
        await phone.dial()
        try:
            await hear_the_acceptance(stack, fake, chat, phone, said)
        finally:
            await phone.hang_up()


async def event_of(chat: Chat, kind: str, **ids: str) -> dict[str, Any] | None:
    """The session's first event of a type (carrying these ids), if there is one yet."""
    for event in await chat.timeline():
        if event["type"] == kind and all(event.get(k) == v for k, v in ids.items()):
            found: dict[str, Any] = event
            return found
    return None


async def hear_the_acceptance(
    stack: SurfaceStack, fake: FakeDeepgram, chat: Chat, phone: Phone, said: str
) -> None:
    """Speak (real audio, real pace), then check what was transcribed, done and heard."""
    name = said.rsplit(" ", 1)[1]
    await phone.talk(await speech(ASK, tail_silence_ms=900))
    started = await eventually(lambda: event_of(chat, "playback.started"), timeout_s=20)
    events = await chat.timeline()
    turn = next(e for e in events if e["type"] == "turn.received")
    assert turn["data"]["text"] == said
    assert turn["data"]["channel"] == "voice"
    reply = next(e for e in events if e["type"] == "turn.replied")
    assert started["data"]["text"] == reply["data"]["text"]
    heard = await phone.wait_for(started["playback_id"])
    # The caller heard the vendor's own audio for the acceptance, all of it.
    speak = next(s for s in fake.speaks if s.text == reply["data"]["text"])
    assert speak.completed
    assert abs(heard.audio_ms - len(speak.audio) // 8) <= 20
    assert abs(started["data"]["duration_ms"] - len(speak.audio) // 8) <= 20
    # Played out on the phone's clock and marked back without a clear: heard.
    finished = await eventually(
        lambda: event_of(chat, "playback.finished", playback_id=started["playback_id"])
    )
    assert finished["data"]["heard"] is True
    assert not heard.flushed
    assert not phone.clears
    # The tool call was admitted and its effect happened once.
    [operation] = (await chat.snapshot())["operations"]
    assert operation["turn_id"] == turn["turn_id"]
    assert name in operation["label"]

    async def effect() -> int:
        return await effects(stack, name)

    assert await eventually(effect, timeout_s=20) == 1
    # The transcript came from the fake's stream: real bytes, at the caller's pace.
    [stream] = [s for s in fake.listens if s.results(final=True)]
    assert stream.results(final=True)[-1]["channel"]["alternatives"][0]["transcript"] == said
    assert len(stream.audio) > 8000
    assert stream.first_audio_at is not None
    assert stream.last_audio_at is not None
    assert stream.last_audio_at - stream.first_audio_at >= 0.8 * len(stream.audio) / 8000 - 0.1
    assert stream.close_stream
    final_at = stream.finals_at[-1]
    assert speak.received_at > final_at
    latency_ms = (speak.received_at - final_at) * 1000
    print(f"\nfinal transcript → acceptance TTS request: {latency_ms:.0f} ms")
