"""Barge-in latency: first voiced frame of the caller → `clear` sent, per VAD configuration.

`.venv/bin/python -m bench.voice` drives the surface's real call handler (`telephony.Call`:
codec, webrtcvad, playback ledger) in process, with a fake WebSocket standing in for
Twilio. Each trial: the agent is speaking (3 s of espeak-ng audio sent, mark pending); the
caller's real speech (espeak-ng, μ-law) arrives in 20 ms frames at real-time pace after a
little silence; the latency runs from handing the first voiced frame (webrtcvad's own
verdict on the clip) to the handler until the fake socket receives `clear`. A second
series feeds short voiced blips (20-100 ms) to count false barge-ins, so the trade-off
between latency and false interruptions is visible.

A third series measures speech stop → first acceptance audio byte, with its parts, on the
same handler with the real engines: pocketsphinx (domain LM) and espeak-ng. The caller's
request is handed over as fast as the handler takes it, then the trailing silence at
real-time pace, since endpointing is what that silence measures. "Speech stop" is when the
last frame webrtcvad calls voiced was handed over; parts: endpointing (→ `finish()` on the
recognizer), STT final (`finish()`), model (the mock model's reply and acceptance phrasing,
in process: the durable admission of a turn is `acceptance.json`'s subject), TTS first
chunk, and the send of the first media frame. Results: `bench/results/voice.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from fastapi import WebSocket

from bench.common import machine, percentiles_ms
from demo.models import MockModel
from libs.domain import SessionState
from libs.events import SpeechStarted
from libs.models.interface import AdmissionNote, TurnRequest
from libs.tools import default_registry
from services.interaction_surface.chat.conversation import tool_spec
from services.interaction_surface.voice.call import Call, SpeechPorts
from services.interaction_surface.voice.codec import (
    PCM_FRAME_BYTES,
    ULAW_FRAME_BYTES,
    FrameSplitter,
    silence_ulaw,
    ulaw_to_pcm16,
)
from services.interaction_surface.voice.engines.base import Recognizer, TextToSpeech, synthesize
from services.interaction_surface.voice.engines.espeak import EspeakTts
from services.interaction_surface.voice.engines.pocketsphinx import PocketsphinxStt
from services.interaction_surface.voice.twilio_frames import TwilioWire
from services.interaction_surface.voice.vad import VadConfig, webrtc_classifier
from services.interaction_surface.voice.wiring import PRIMER_TEXT
from testkit import stimuli
from testkit.speech_corpus import demo_vocabulary

RESULTS = Path(__file__).parent / "results" / "voice.json"
PHRASES = (
    "wait, one moment please",
    "no, stop",
    "hold on, I have a question",
    "actually, cancel the booking",
    "sorry, what did you say",
)
REQUESTS = (
    "give me access to notion and gitlab",
    "give me access to github and jira",
    "give me access to slack",
    "grant me access to figma",
)
BLIPS_MS = (20, 40, 60, 80, 100, 120)
CONFIGS = {
    # The default: webrtcvad suspects, Silero confirms, the caller's level decides.
    "silero": VadConfig(aggressiveness=2, min_speech_ms=60, endpoint_silence_ms=500),
    # The previous detector (HOLDLINE_VAD_DETECTOR=webrtc), responsive and conservative.
    "responsive": VadConfig(
        aggressiveness=2, min_speech_ms=60, endpoint_silence_ms=500, detector="webrtc"
    ),
    "conservative": VadConfig(
        aggressiveness=3, min_speech_ms=140, endpoint_silence_ms=700, detector="webrtc"
    ),
}
BACKGROUND = "and then she told me that the train was late again, can you believe it"
BACKCHANNEL = "uh huh"


class FakeTwilio:
    """Receives what the handler sends; notes when `clear` arrives, and plays the media on
    the phone's model: each frame when it arrives or when the audio before it ends."""

    def __init__(self) -> None:
        self.cleared_at: float | None = None
        self.cleared = asyncio.Event()
        self.audio = bytearray()
        self.gaps: list[float] = []
        self._play_until: float | None = None

    async def send_text(self, text: str) -> None:
        if '"event":"clear"' in text and self.cleared_at is None:
            self.cleared_at = time.perf_counter()
            self.cleared.set()
        elif '"event":"media"' in text:
            now = time.perf_counter()
            piece = base64.b64decode(json.loads(text)["media"]["payload"])
            if self._play_until is not None and now > self._play_until:
                self.gaps.append(now - self._play_until)
            start = now if self._play_until is None else max(now, self._play_until)
            self._play_until = start + len(piece) / 8000
            self.audio += piece


class FirstMedia:
    """Notes when the first `media` frame goes out."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.sent = asyncio.Event()

    async def send_text(self, text: str) -> None:
        if '"event":"media"' in text and self.at is None:
            self.at = time.perf_counter()
            self.sent.set()


@dataclass
class Parts:
    """Wall-clock marks of one speech-stop trial (perf_counter seconds)."""

    finish_started: float | None = None
    finish_ended: float | None = None
    model_ended: float | None = None
    tts_called: float | None = None
    tts_first_chunk: float | None = None
    transcript: str = ""


class TimedRecognizer:
    """The real recognizer; notes when the final transcript was asked for and given."""

    def __init__(self, inner: Recognizer, parts: Parts) -> None:
        self._inner = inner
        self._parts = parts

    def feed(self, pcm16_8k: bytes) -> None:
        self._inner.feed(pcm16_8k)

    def finish(self) -> str:
        self._parts.finish_started = time.perf_counter()
        text = self._inner.finish()
        self._parts.finish_ended = time.perf_counter()
        self._parts.transcript = text
        return text


class TimedStt:
    """Hands out timed recognizers over the real engine."""

    def __init__(self, inner: PocketsphinxStt, parts: Parts) -> None:
        self._inner = inner
        self._parts = parts

    def session(self) -> Recognizer:
        return TimedRecognizer(self._inner.session(), self._parts)


class TimedTts:
    """The real TTS; notes the call and its first chunk."""

    def __init__(self, inner: TextToSpeech, parts: Parts) -> None:
        self._inner = inner
        self._parts = parts

    async def stream(self, text: str) -> AsyncIterator[bytes]:
        self._parts.tts_called = time.perf_counter()
        async for chunk in self._inner.stream(text):
            if self._parts.tts_first_chunk is None:
                self._parts.tts_first_chunk = time.perf_counter()
            yield chunk


class CannedTts:
    """The agent's audio, already synthesized (TTS speed is not what is measured)."""

    def __init__(self, audio: bytes) -> None:
        self.audio = audio

    async def stream(self, text: str) -> AsyncIterator[bytes]:
        del text
        yield self.audio


async def _nothing(*_args: Any, **_kwargs: Any) -> None:
    return None


def _first_voiced(ulaw: bytes, aggressiveness: int, min_rms: int) -> int:
    classify = webrtc_classifier(aggressiveness, min_rms)
    for index, frame in enumerate(FrameSplitter(PCM_FRAME_BYTES).push(ulaw_to_pcm16(ulaw))):
        if classify(frame):
            return index
    raise ValueError("no voiced frame")


async def _call(
    config: VadConfig, agent_audio: bytes, stt: PocketsphinxStt | None = None,
    controls: list[Any] | None = None, records: list[Any] | None = None,
) -> tuple[Call, FakeTwilio]:
    fake = FakeTwilio()

    async def record(_session_id: str, event: Any, **_ids: Any) -> None:
        if records is not None:
            records.append(event)

    async def control(_session_id: str, event: Any, **_ids: Any) -> None:
        if controls is not None:
            controls.append(event)

    ports = SpeechPorts(
        tts=CannedTts(agent_audio), stt=stt, vad=config, record=record,
        append_control=control, turn=None,
    )
    session = SessionState(session_id="s_bench", user_id="u", tenant_id="t", agent="a",
                           token_hash="sha256:bench")  # noqa: S106 - not a secret
    call = Call(TwilioWire(cast(WebSocket, fake), "MZbench"), session, "CAbench", ports)
    return call, fake


async def _stream(
    call: Call, ulaw: bytes, stop: asyncio.Event, held: list[float] | None = None,
    *, fast: bool = False,
) -> list[float]:
    """Real-time pace (or `fast`); returns when each frame was handed over; notes in
    `held` when the call stopped sending (a suspected barge-in)."""
    handed: list[float] = []
    start = time.perf_counter()
    for index in range(0, len(ulaw), ULAW_FRAME_BYTES):
        if stop.is_set():
            break
        handed.append(time.perf_counter())
        await call.on_media(ulaw[index : index + ULAW_FRAME_BYTES])
        if held is not None and not held and call.held_since is not None:
            held.append(time.perf_counter())
        delay = start + (index // ULAW_FRAME_BYTES + 1) * 0.02 - time.perf_counter()
        if delay > 0 and not fast:
            await asyncio.sleep(delay)
        elif fast:
            await asyncio.sleep(0)
    return handed


async def _trial(
    config: VadConfig, agent_audio: bytes, caller: bytes, lead_ms: int
) -> tuple[float, float, int]:
    """(first voiced frame → agent audio stopped being sent, → clear), seconds, and the
    audio it took: 20 ms frames from the first voiced one to the one whose handling sent
    `clear`, both included (independent of the machine's load)."""
    call, fake = await _call(config, agent_audio)
    speaking = asyncio.create_task(call.say("agent talking", "p1"))
    await asyncio.sleep(0.01)
    if not call.ledger.active:
        raise RuntimeError("the agent is not speaking")
    audio = silence_ulaw(lead_ms) + caller + silence_ulaw(300)
    first = _first_voiced(audio, config.aggressiveness, config.min_rms)
    held: list[float] = []
    handed = await _stream(call, audio, fake.cleared, held)
    await asyncio.wait_for(speaking, 2)
    await call.drain()
    if fake.cleared_at is None:
        raise RuntimeError("no clear for real speech")
    stopped = min(held[0], fake.cleared_at) if held else fake.cleared_at
    decided = max(i for i, at in enumerate(handed) if at <= fake.cleared_at)
    return stopped - handed[first], fake.cleared_at - handed[first], decided - first + 1


async def _stimulus_trial(
    config: VadConfig, agent_audio: bytes, own_speech: bytes, stimulus: bytes,
    stt: PocketsphinxStt | None = None,
) -> dict[str, Any]:
    """The caller speaks once (their level), then a stimulus while the agent talks."""
    controls: list[Any] = []
    records: list[Any] = []
    call, fake = await _call(config, agent_audio, stt, controls, records)
    await _stream(call, own_speech + silence_ulaw(config.endpoint_silence_ms + 100),
                  asyncio.Event(), fast=True)
    speaking = asyncio.create_task(call.say("agent talking", "p1"))
    await asyncio.sleep(0.3)
    if not call.ledger.active:
        raise RuntimeError("the agent is not speaking")
    await _stream(call, stimulus + silence_ulaw(config.endpoint_silence_ms + 300),
                  asyncio.Event())
    cut = fake.cleared_at is not None
    speaking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await speaking
    await call.hang_up("bench")
    return {
        "cut": cut,
        # Speech confirmed beyond the caller's own first utterance (a turn, with words).
        "confirmed": sum(isinstance(r, SpeechStarted) for r in records) > 1,
        "gap_s": max(fake.gaps, default=0.0),
        # The agent's audio so far arrived once and in order: no word repeated or lost.
        "intact": bytes(fake.audio) == agent_audio[: len(fake.audio)],
        "continued": any(getattr(c, "continued", False) for c in controls),
    }


async def _blip(config: VadConfig, agent_audio: bytes, voiced: bytes, blip_ms: int) -> bool:
    call, fake = await _call(config, agent_audio)
    speaking = asyncio.create_task(call.say("agent talking", "p1"))
    await asyncio.sleep(0.01)
    if not call.ledger.active:
        raise RuntimeError("the agent is not speaking")
    middle = len(voiced) // 2
    blip = voiced[middle : middle + blip_ms * 8]
    await _stream(call, silence_ulaw(100) + blip + silence_ulaw(200), fake.cleared)
    speaking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await speaking
    await call.hang_up("bench")
    return fake.cleared_at is not None


class MockTurn:
    """The turn port, with the mock model in process: reply, then its acceptance sentence."""

    def __init__(self, parts: Parts) -> None:
        self._model = MockModel()
        self._registry = default_registry()
        self._tools = tuple(tool_spec(t) for t in self._registry.tools())
        self._parts = parts
        self._turns = 0

    async def __call__(
        self, session: SessionState, text: str, client_turn_id: str | None = None,
        review: Any = None,
    ) -> tuple[str, str, str, tuple[str, ...]]:
        del client_turn_id, review
        self._turns += 1
        turn_id = f"turn{self._turns}"
        request = TurnRequest(
            session_id=session.session_id, turn_id=turn_id, agent=session.agent,
            language="en", user_text=text, history=(), tools=self._tools,
            today=datetime.now(UTC).date().isoformat(),
        )
        reply = await self._model.respond(request)
        notes = [
            AdmissionNote(operation_id=f"op{i}", tool=c.tool, status="admitted",
                          label=self._registry.label(c.tool, c.arguments))
            for i, c in enumerate(reply.calls)
        ]
        accepted = await self._model.accept(request, reply, notes)
        self._parts.model_ended = time.perf_counter()
        return turn_id, f"resp{self._turns}", accepted, ()


def _last_voiced(ulaw: bytes, aggressiveness: int, min_rms: int) -> int:
    classify = webrtc_classifier(aggressiveness, min_rms)
    last = -1
    for index, frame in enumerate(FrameSplitter(PCM_FRAME_BYTES).push(ulaw_to_pcm16(ulaw))):
        if classify(frame):
            last = index
    if last < 0:
        raise ValueError("no voiced frame")
    return last


async def _stop_trial(
    config: VadConfig, stt: PocketsphinxStt, tts: TextToSpeech, request: bytes
) -> dict[str, float] | None:
    """One request; the parts in seconds, or None when nothing was recognised."""
    parts = Parts()
    fake = FirstMedia()
    ports = SpeechPorts(
        tts=TimedTts(tts, parts), stt=TimedStt(stt, parts), vad=config, record=_nothing,
        append_control=_nothing, turn=MockTurn(parts),
    )
    session = SessionState(session_id="s_bench", user_id="u", tenant_id="t", agent="concierge",
                           token_hash="sha256:bench")  # noqa: S106 - not a secret
    call = Call(TwilioWire(cast(WebSocket, fake), "MZbench"), session, "CAbench", ports)
    audio = silence_ulaw(200) + request
    last = _last_voiced(audio, config.aggressiveness, config.min_rms)
    voiced_end = (last + 1) * ULAW_FRAME_BYTES
    # The request as fast as the handler takes it: the decoder is caught up at speech stop.
    await call.on_media(audio[:voiced_end])
    stopped = time.perf_counter()
    tail = audio[voiced_end:] + silence_ulaw(config.endpoint_silence_ms + 400)
    await _stream(call, tail, fake.sent)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(fake.sent.wait(), 10)
    await call.hang_up("bench")
    if fake.at is None or parts.finish_started is None or not parts.transcript:
        return None
    assert parts.finish_ended is not None
    assert parts.model_ended is not None
    assert parts.tts_called is not None
    assert parts.tts_first_chunk is not None
    return {
        "total": fake.at - stopped,
        "endpointing": parts.finish_started - stopped,
        "stt_final": parts.finish_ended - parts.finish_started,
        "model": parts.model_ended - parts.finish_ended,
        "tts_first_chunk": parts.tts_first_chunk - parts.tts_called,
        "send_first_media": fake.at - parts.tts_first_chunk,
    }


async def speech_stop_series(
    config: VadConfig, trials: int, stt: PocketsphinxStt, tts: TextToSpeech,
    requests: list[bytes],
) -> dict[str, Any]:
    """Speech stop → first acceptance audio byte, with its parts, over `trials` requests."""
    measured: dict[str, list[float]] = {}
    missed = 0
    for i in range(trials):
        found = await _stop_trial(config, stt, tts, requests[i % len(requests)])
        if found is None:
            missed += 1
            continue
        for key, value in found.items():
            measured.setdefault(key, []).append(value)
    total = percentiles_ms(measured.get("total", []))
    budget = config.endpoint_silence_ms + 250
    return {
        "trials": trials,
        "not_recognised": missed,
        "target_p95_ms": budget,
        "target_met": bool(total.get("p95_ms")) and total["p95_ms"] <= budget,
        "total_ms": total,
        "parts": {key: percentiles_ms(values) for key, values in measured.items()
                  if key != "total"},
    }


def _stimuli(level: float, background: bytes, backchannel: bytes, seed: int) -> dict[str, bytes]:
    """Every stimulus class, at the caller's level (background talk 14 dB below it)."""
    return {
        "cough": stimuli.at_level(stimuli.cough(seed), level),
        "knock": stimuli.at_level(stimuli.knock(seed), level),
        "breath": stimuli.at_level(stimuli.breath(seed), level),
        "hiss": stimuli.at_level(stimuli.hiss(seed), level),
        "background_talk_minus_14db": stimuli.attenuate(
            stimuli.at_level(background, level), 14
        ),
        "backchannel": backchannel,
    }


async def stimulus_series(
    config: VadConfig, agent_audio: bytes, own: bytes, *, tts: TextToSpeech,
    stt: PocketsphinxStt, trials: int,
) -> dict[str, Any]:
    """False cuts per stimulus class, the gap a false alarm leaves, and whether the agent's
    audio arrived intact; backchannels with the real recognizer (to know what was said)."""
    level = stimuli.speech_level(own)
    background = await synthesize(tts, BACKGROUND)
    backchannel = await synthesize(tts, BACKCHANNEL)
    out: dict[str, Any] = {}
    for i in range(trials):
        for name, clip in _stimuli(level, background, backchannel, seed=i + 1).items():
            found = await _stimulus_trial(
                config, agent_audio, own, clip, stt if name == "backchannel" else None
            )
            row = out.setdefault(name, {"trials": 0, "cuts": 0, "speech_confirmed": 0,
                                        "not_intact": 0, "continued": 0, "gaps": []})
            row["trials"] += 1
            row["cuts"] += found["cut"]
            row["speech_confirmed"] += found["confirmed"]
            row["continued"] += found["continued"]
            if not found["cut"]:
                row["not_intact"] += not found["intact"]
                row["gaps"].append(found["gap_s"])
    for row in out.values():
        row["false_alarm_gap_ms"] = percentiles_ms(row.pop("gaps"))
    return out


def _frame_counts(frames: list[int]) -> dict[str, Any]:
    ordered = sorted(frames)

    def at(q: float) -> int:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {
        "p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": ordered[-1],
        "histogram": {str(n): ordered.count(n) for n in sorted(set(ordered))},
    }


async def run(trials: int, blips: int, stop_trials: int, stimulus_trials: int) -> dict[str, Any]:
    tts = EspeakTts()
    agent_audio = await synthesize(
        tts, "I am on it: I asked for your accesses and I will tell you when they are ready."
    )
    callers = [await synthesize(tts, phrase) for phrase in PHRASES]
    rng = random.Random(7)  # noqa: S311 - reproducible trial order, not security
    stt = PocketsphinxStt(await synthesize(tts, PRIMER_TEXT), demo_vocabulary())
    requests = [await synthesize(tts, phrase) for phrase in REQUESTS]
    series: dict[str, Any] = {}
    for name, config in CONFIGS.items():
        measured = [
            await _trial(config, agent_audio, callers[i % len(callers)], rng.randrange(60, 300, 20))
            for i in range(trials)
        ]
        false_starts = dict.fromkeys(BLIPS_MS, 0)
        tried = dict.fromkeys(BLIPS_MS, 0)
        for i in range(blips):
            blip_ms = BLIPS_MS[i % len(BLIPS_MS)]
            tried[blip_ms] += 1
            false_starts[blip_ms] += await _blip(
                config, agent_audio, callers[i % len(callers)], blip_ms
            )
        series[name] = {
            "vad": {
                "detector": config.detector,
                "aggressiveness": config.aggressiveness,
                "min_speech_ms": config.min_speech_ms,
                "endpoint_silence_ms": config.endpoint_silence_ms,
                "min_rms": config.min_rms,
                "speech_prob": config.speech_prob,
                "confirm_ms": config.confirm_ms,
                "confirm_window_ms": config.confirm_window_ms,
                "level_db": config.level_db,
            },
            "trials": trials,
            # First voiced frame -> clear sent (the line flushed).
            "barge_in_ms": percentiles_ms([clear for _, clear, _ in measured]),
            # The same in audio: 20 ms frames heard, first voiced one to the deciding one.
            "barge_in_audio_frames": _frame_counts([frames for _, _, frames in measured]),
            # First voiced frame -> the agent's audio stopped being sent (hold or clear).
            "stop_sending_ms": percentiles_ms([stop for stop, _, _ in measured]),
            "blip_trials_by_ms": {str(ms): n for ms, n in tried.items()},
            # Voiced bursts cut from real speech: how many of them interrupted the agent.
            "barge_ins_by_blip_ms": {str(ms): n for ms, n in false_starts.items()},
            "stimuli": await stimulus_series(
                config, agent_audio, requests[0], tts=tts, stt=stt, trials=stimulus_trials
            ),
            "speech_stop_to_first_audio": await speech_stop_series(
                config, stop_trials, stt, tts, requests
            ),
        }
    return series


def main() -> None:
    """Run and write `bench/results/voice.json`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--blips", type=int, default=60)
    parser.add_argument(
        "--stop-trials", type=int, default=None,
        help="speech stop -> first acceptance audio trials per configuration "
        "(default: --trials, at most 60)",
    )
    parser.add_argument("--stimulus-trials", type=int, default=5,
                        help="trials per stimulus class and configuration")
    args = parser.parse_args()
    stop_trials = args.stop_trials if args.stop_trials is not None else min(args.trials, 60)
    load = os.getloadavg()
    series = asyncio.run(run(args.trials, args.blips, stop_trials, args.stimulus_trials))
    result = {
        "benchmark": "voice barge-in",
        "when": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "load_average_at_start": [round(x, 2) for x in load],
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        "measure": "first voiced inbound frame handed to the call handler -> clear sent "
        "(barge_in_ms); -> the agent's audio stopped being sent (stop_sending_ms); "
        "barge_in_audio_frames: 20 ms frames of caller audio from the first voiced one to "
        "the one whose handling sent clear, both included (load-independent)",
        "target": "barge-in p99 <= 90 ms on real speech; 0 false cuts on cough, knock, "
        "breath, hiss at speech level; background talk 14 dB below neither cuts nor "
        "becomes a turn; a false alarm's gap <= 250 ms with the agent's audio intact",
        "stimuli_measure": "per class: cuts (clear sent), speech_confirmed, "
        "not_intact (agent audio bytes differ from what was synthesized), continued "
        "(backchannel: the agent carried on), false_alarm_gap_ms (longest silence the "
        "phone's playout model heard inside the agent's audio, per uncut trial)",
        "speech_stop_measure": (
            "last voiced inbound frame handed to the call handler -> first media frame of "
            "the acceptance sent (parts: endpointing, stt_final, model, tts_first_chunk, "
            "send_first_media)"
        ),
        "speech_stop_target": "acceptance audio within the endpointing window + 250 ms at p95",
        "series": series,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
