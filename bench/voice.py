"""Barge-in latency: first voiced frame of the caller → `clear` sent, per VAD configuration.

`.venv/bin/python -m bench.voice` drives the surface's real call handler (`telephony.Call`:
codec, webrtcvad, playback ledger) in process, with a fake WebSocket standing in for
Twilio. Each trial: the agent is speaking (3 s of espeak-ng audio sent, mark pending); the
caller's real speech (espeak-ng, μ-law) arrives in 20 ms frames at real-time pace after a
little silence; the latency runs from handing the first voiced frame (webrtcvad's own
verdict on the clip) to the handler until the fake socket receives `clear`. A second
series feeds short voiced blips (20-100 ms) to count false barge-ins, so the trade-off
between latency and false interruptions is visible. Results: `bench/results/voice.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from fastapi import WebSocket

from bench.common import machine, percentiles_ms
from libs.domain import SessionState
from services.interaction_surface.codec import (
    PCM_FRAME_BYTES,
    ULAW_FRAME_BYTES,
    FrameSplitter,
    silence_ulaw,
    ulaw_to_pcm16,
)
from services.interaction_surface.speech import EspeakTts, synthesize
from services.interaction_surface.telephony import Call, SpeechPorts
from services.interaction_surface.vad import VadConfig, webrtc_classifier

RESULTS = Path(__file__).parent / "results" / "voice.json"
PHRASES = (
    "wait, one moment please",
    "no, stop",
    "hold on, I have a question",
    "actually, cancel the booking",
    "sorry, what did you say",
)
BLIPS_MS = (20, 40, 60, 80, 100, 120)
CONFIGS = {
    "responsive": VadConfig(aggressiveness=2, min_speech_ms=60, endpoint_silence_ms=500),
    "conservative": VadConfig(aggressiveness=3, min_speech_ms=140, endpoint_silence_ms=700),
}


class FakeTwilio:
    """Receives what the handler sends; notes when `clear` arrives."""

    def __init__(self) -> None:
        self.cleared_at: float | None = None
        self.cleared = asyncio.Event()

    async def send_text(self, text: str) -> None:
        if '"event":"clear"' in text and self.cleared_at is None:
            self.cleared_at = time.perf_counter()
            self.cleared.set()


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


async def _call(config: VadConfig, agent_audio: bytes) -> tuple[Call, FakeTwilio]:
    fake = FakeTwilio()
    ports = SpeechPorts(
        tts=CannedTts(agent_audio), stt=None, vad=config, record=_nothing,
        append_control=_nothing, turn=None,
    )
    session = SessionState(session_id="s_bench", user_id="u", tenant_id="t", agent="a",
                           token_hash="sha256:bench")  # noqa: S106 - not a secret
    call = Call(cast(WebSocket, fake), session, "MZbench", "CAbench", ports)
    return call, fake


async def _stream(call: Call, ulaw: bytes, stop: asyncio.Event) -> list[float]:
    """Real-time pace; returns when each frame was handed over."""
    handed: list[float] = []
    start = time.perf_counter()
    for index in range(0, len(ulaw), ULAW_FRAME_BYTES):
        if stop.is_set():
            break
        handed.append(time.perf_counter())
        await call.on_media(ulaw[index : index + ULAW_FRAME_BYTES])
        delay = start + (index // ULAW_FRAME_BYTES + 1) * 0.02 - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
    return handed


async def _trial(config: VadConfig, agent_audio: bytes, caller: bytes, lead_ms: int) -> float:
    call, fake = await _call(config, agent_audio)
    speaking = asyncio.create_task(call.say("agent talking", "p1"))
    await asyncio.sleep(0.01)
    if not call.ledger.active:
        raise RuntimeError("the agent is not speaking")
    audio = silence_ulaw(lead_ms) + caller + silence_ulaw(300)
    first = _first_voiced(audio, config.aggressiveness, config.min_rms)
    handed = await _stream(call, audio, fake.cleared)
    await asyncio.wait_for(speaking, 2)
    await call.drain()
    if fake.cleared_at is None:
        raise RuntimeError("no clear for real speech")
    return fake.cleared_at - handed[first]


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


async def run(trials: int, blips: int) -> dict[str, Any]:
    tts = EspeakTts()
    agent_audio = await synthesize(
        tts, "I am on it: I asked for your accesses and I will tell you when they are ready."
    )
    callers = [await synthesize(tts, phrase) for phrase in PHRASES]
    rng = random.Random(7)  # noqa: S311 - reproducible trial order, not security
    series: dict[str, Any] = {}
    for name, config in CONFIGS.items():
        latencies = [
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
                "aggressiveness": config.aggressiveness,
                "min_speech_ms": config.min_speech_ms,
                "endpoint_silence_ms": config.endpoint_silence_ms,
                "min_rms": config.min_rms,
            },
            "trials": trials,
            "barge_in_ms": percentiles_ms(latencies),
            "blip_trials_by_ms": {str(ms): n for ms, n in tried.items()},
            # Voiced bursts cut from real speech: how many of them interrupted the agent.
            "barge_ins_by_blip_ms": {str(ms): n for ms, n in false_starts.items()},
        }
    return series


def main() -> None:
    """Run and write `bench/results/voice.json`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--blips", type=int, default=60)
    args = parser.parse_args()
    series = asyncio.run(run(args.trials, args.blips))
    result = {
        "benchmark": "voice barge-in",
        "when": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "measure": "first voiced inbound frame handed to the call handler -> clear sent",
        "target": "barge-in p99 <= 120 ms with a 60 ms minimum speech duration",
        "series": series,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
