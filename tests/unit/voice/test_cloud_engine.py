"""The Deepgram engines against a local fake of the vendor's wire protocol (real sockets).

Unit level: the recognizer streams real μ-law at real pace and yields interim then final
transcripts; vendor refusals, busy signals and a dropped socket end in a retry, a replay
or a clear error, never a hang; TTS audio is usable chunk by chunk and cancelling it hangs
up on the vendor. End to end (tests/system/voice/test_cloud_engine.py): a phone call on a
stack built with both cloud engines.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from services.interaction_surface.voice.codec import ULAW_FRAME_BYTES, ulaw_to_pcm16
from services.interaction_surface.voice.engines.base import SpeechError, final_text, synthesize
from services.interaction_surface.voice.engines.deepgram import (
    DeepgramConfig,
    DeepgramTts,
    VendorError,
)
from services.interaction_surface.voice.engines.deepgram_stt import (
    DeepgramRecognizer,
    DeepgramStt,
    Transcript,
)
from services.interaction_surface.voice.settings import deepgram_from_env
from testkit.fake_cloud_speech import ASK, FakeDeepgram, fake
from testkit.phone import speech
from testkit.surface import eventually

__all__ = ["fake"]  # the fixture, from testkit


def config_for(fake: FakeDeepgram, **overrides: Any) -> DeepgramConfig:
    """Engine settings pointed at the fake, with short backoffs."""
    values: dict[str, Any] = {
        "api_key": fake.api_key, "base_url": fake.url, "backoff_s": 0.05, "timeout_s": 5.0,
        "finalize_s": 5.0,
    }
    return DeepgramConfig(**{**values, **overrides})


async def talk(recognizer: DeepgramRecognizer, ulaw: bytes, *, realtime: bool = True) -> None:
    """Feed 20 ms PCM frames, at the telephone's pace unless told otherwise."""
    start = time.monotonic()
    for index in range(0, len(ulaw), ULAW_FRAME_BYTES):
        recognizer.feed(ulaw_to_pcm16(ulaw[index : index + ULAW_FRAME_BYTES]))
        if realtime:
            delay = start + (index // ULAW_FRAME_BYTES + 1) * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
        else:
            await asyncio.sleep(0)


async def collect(recognizer: DeepgramRecognizer) -> list[Transcript]:
    """Every event until the stream is over."""
    return [event async for event in recognizer.results()]


async def test_streams_real_audio_and_yields_interim_then_final(fake: FakeDeepgram) -> None:
    fake.prime(ASK)
    audio = await speech(ASK, tail_silence_ms=600)
    recognizer = DeepgramStt(config_for(fake, endpointing_ms=300)).session()
    events = asyncio.create_task(collect(recognizer))
    await talk(recognizer, audio)
    assert await final_text(recognizer) == ASK
    seen = await asyncio.wait_for(events, 5)
    kinds = [e.kind for e in seen]
    assert "interim" in kinds
    assert kinds.index("interim") < kinds.index("final")
    finals = [e for e in seen if e.kind == "final"]
    assert [e.text for e in finals] == [ASK]
    assert finals[0].speech_final
    interims = [e.text for e in seen if e.kind == "interim"]
    assert all(ASK.startswith(text) and text != ASK for text in interims)
    # The vendor got the real bytes, at the caller's pace, in the format the URL announced.
    [stream] = fake.listens
    assert bytes(stream.audio) == audio
    assert stream.first_audio_at is not None
    assert stream.last_audio_at is not None
    assert stream.last_audio_at - stream.first_audio_at >= 0.8 * len(audio) / 8000 - 0.1
    assert {k: stream.params[k] for k in ("encoding", "sample_rate", "channels",
                                          "interim_results", "endpointing")} == {
        "encoding": "mulaw", "sample_rate": "8000", "channels": "1",
        "interim_results": "true", "endpointing": "300"}
    assert stream.close_stream
    assert stream.close_code == 1000
    assert stream.sent[-1]["type"] == "Metadata"
    assert stream.results(final=True)[0]["speech_final"] is True


async def test_keepalive_holds_a_quiet_stream_and_its_absence_drops_it(fake: FakeDeepgram) -> None:
    fake.prime("hold on")
    fake.no_audio_timeout_s = 0.5
    recognizer = DeepgramStt(config_for(fake, keepalive_s=0.2)).session()
    await talk(recognizer, await speech("hold on", tail_silence_ms=0), realtime=False)
    # Twice the vendor's patience without audio: only the KeepAlives keep the stream open.
    await asyncio.sleep(1.0)
    assert await recognizer.final() == "hold on"
    [stream] = fake.listens
    assert stream.keepalives >= 3
    assert stream.close_stream
    assert stream.close_code == 1000
    assert recognizer.connections == 1
    # Without them the vendor gives up on the stream (NET-0001); the engine reconnects.
    fake.prime("hold on")
    patient = DeepgramStt(config_for(fake, keepalive_s=5.0)).session()
    await talk(patient, await speech("hold on", tail_silence_ms=0), realtime=False)

    async def reconnected() -> bool:
        return len(fake.listens) == 3

    await eventually(reconnected, timeout_s=5)
    assert await patient.final() == "hold on"
    timed_out = fake.listens[1]
    assert timed_out.close_code == 1011
    assert timed_out.keepalives == 0
    assert patient.connections == 2


async def test_bad_key_is_a_clear_error_without_retries(fake: FakeDeepgram) -> None:
    recognizer = DeepgramStt(config_for(fake, api_key="wrong", retries=3)).session()
    recognizer.feed(ulaw_to_pcm16(await speech("yes", tail_silence_ms=0)))
    seen = await asyncio.wait_for(collect(recognizer), 5)
    assert [e.kind for e in seen] == ["error"]
    assert "401" in seen[0].text
    assert "Invalid credentials" in seen[0].text
    assert await asyncio.wait_for(recognizer.final(), 2) == ""
    assert fake.handshakes == 1
    assert fake.listens == []


async def test_busy_and_broken_vendor_is_retried_then_given_up(fake: FakeDeepgram) -> None:
    fake.prime("yes please")
    fake.handshake_faults.extend([429, 503])
    audio = await speech("yes please", tail_silence_ms=400)
    recognizer = DeepgramStt(config_for(fake, retries=2)).session()
    await talk(recognizer, audio, realtime=False)
    assert await recognizer.final() == "yes please"
    assert fake.handshakes == 3
    assert len(fake.listens) == 1
    assert bytes(fake.listens[0].audio) == audio
    # Out of retries: an error event, and the utterance ends with nothing, promptly.
    fake.handshake_faults.extend([500, 502, 503])
    failing = DeepgramStt(config_for(fake, retries=2)).session()
    failing.feed(ulaw_to_pcm16(audio))
    seen = await asyncio.wait_for(collect(failing), 5)
    assert [e.kind for e in seen] == ["error"]
    assert "503" in seen[0].text
    assert await asyncio.wait_for(failing.final(), 2) == ""
    assert fake.handshakes == 6


async def test_socket_drop_mid_stream_reconnects_and_replays(fake: FakeDeepgram) -> None:
    fake.prime(ASK)
    audio = await speech(ASK, tail_silence_ms=600)
    fake.drop_after_bytes.append(len(audio) // 3)
    recognizer = DeepgramStt(config_for(fake)).session()
    events = asyncio.create_task(collect(recognizer))
    await talk(recognizer, audio, realtime=False)
    assert await final_text(recognizer) == ASK
    seen = await asyncio.wait_for(events, 5)
    assert "reconnected" in [e.kind for e in seen]
    assert [e.text for e in seen if e.kind == "final"] == [ASK]
    first, second = fake.listens
    assert first.close_code == 1011
    assert not first.results(final=True)
    # Nothing was final before the drop, so the new stream hears the utterance from the top.
    assert bytes(second.audio) == audio
    assert recognizer.connections == 2


async def test_drop_without_a_way_back_is_an_error_not_a_hang(fake: FakeDeepgram) -> None:
    fake.prime(ASK)
    audio = await speech(ASK, tail_silence_ms=600)
    fake.drop_after_bytes.append(len(audio) // 3)
    fake.handshake_faults.extend([None, 503, 503])  # the first stream is accepted
    recognizer = DeepgramStt(config_for(fake, retries=2)).session()
    events = asyncio.create_task(collect(recognizer))
    await talk(recognizer, audio, realtime=False)
    started = time.monotonic()
    assert await recognizer.final() == ""
    assert time.monotonic() - started < 5
    seen = await asyncio.wait_for(events, 5)
    assert seen[-1].kind == "error"
    assert "503" in seen[-1].text
    assert fake.handshakes == 3
    assert len(fake.listens) == 1


async def test_tts_chunks_are_usable_before_the_last_one_arrives(fake: FakeDeepgram) -> None:
    tts = DeepgramTts(config_for(fake))
    text = "Your access to github is on its way, I will tell you when it is done."
    chunks: list[bytes] = []
    sent_when_first_arrived = -1
    try:
        async for chunk in tts.stream(text):
            if not chunks:
                sent_when_first_arrived = fake.speaks[0].chunks_sent
            chunks.append(chunk)
    finally:
        await tts.aclose()
    [speak] = fake.speaks
    assert speak.text == text
    assert speak.params == {"model": "aura-2-thalia-en", "encoding": "mulaw",
                            "sample_rate": "8000", "container": "none"}
    assert speak.completed
    assert speak.chunks_total >= 3
    assert 0 <= sent_when_first_arrived < speak.chunks_total
    # Exactly the vendor's audio, in order: real speech, several seconds of it.
    assert b"".join(chunks) == speak.audio
    assert len(speak.audio) > 8000


async def test_cancelling_tts_hangs_up_on_the_vendor(fake: FakeDeepgram) -> None:
    fake.chunk_gap_s = 0.1
    tts = DeepgramTts(config_for(fake))
    first = asyncio.Event()

    async def play() -> None:
        async for _chunk in tts.stream("one two three four five six seven eight nine ten"):
            first.set()

    task = asyncio.create_task(play())
    await asyncio.wait_for(first.wait(), 10)
    task.cancel()  # a barge-in cancels the voice
    with pytest.raises(asyncio.CancelledError):
        await task
    [speak] = fake.speaks

    async def stopped() -> bool:
        return speak.disconnected

    await eventually(stopped, timeout_s=5)
    assert not speak.completed
    assert speak.chunks_sent < speak.chunks_total
    await tts.aclose()


async def test_tts_vendor_errors(fake: FakeDeepgram) -> None:
    tts = DeepgramTts(config_for(fake, api_key="wrong"))
    with pytest.raises(VendorError) as refused:
        await synthesize(tts, "hello")
    assert refused.value.status == 401
    assert not refused.value.retryable
    assert fake.speaks == []
    await tts.aclose()
    tts = DeepgramTts(config_for(fake, retries=2))
    fake.speak_faults.extend([429, 500])
    audio = await synthesize(tts, "hello there")
    assert audio == fake.speaks[-1].audio
    assert len(fake.speaks) == 1
    fake.speak_faults.extend([503, 503, 503])
    with pytest.raises(SpeechError, match="503"):
        await synthesize(tts, "hello again")
    assert len(fake.speaks) == 1
    assert not fake.speak_faults
    await tts.aclose()


def test_config_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DEEPGRAM_API_KEY", raising=False)
    with pytest.raises(SpeechError, match="DEEPGRAM_API_KEY"):
        deepgram_from_env()
    monkeypatch.setenv("DEEPGRAM_API_KEY", "k1")
    monkeypatch.setenv("HOLDLINE_DEEPGRAM_URL", "https://dg.example.test/")
    monkeypatch.setenv("HOLDLINE_DEEPGRAM_ENDPOINTING_MS", "250")
    config = deepgram_from_env()
    assert config.headers == {"Authorization": "Token k1"}
    assert config.listen_url() == (
        "wss://dg.example.test/v1/listen?model=nova-3&language=en&encoding=mulaw"
        "&sample_rate=8000&channels=1&interim_results=true&endpointing=250"
    )
