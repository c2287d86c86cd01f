"""Non-speech sounds and background talk for the voice tests and the bench, made
deterministically (seeded), at the level of the caller's speech.

Each is μ-law 8 kHz, as a phone sends it. `at_level` scales PCM to a target RMS so a
stimulus can be played "at speech level" or "14 dB below the caller".
"""

from __future__ import annotations

import math
import random
import struct

from services.interaction_surface.voice.codec import pcm16_to_ulaw, rms, ulaw_to_pcm16

RATE = 8000


def _pack(samples: list[float]) -> bytes:
    return struct.pack(
        f"<{len(samples)}h", *(max(-32767, min(32767, int(s))) for s in samples)
    )


def _unpack(pcm16: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(pcm16) // 2}h", pcm16))


def at_level(ulaw: bytes, target_rms: float) -> bytes:
    """The audio scaled so its RMS over the non-silent part is `target_rms`."""
    pcm = _unpack(ulaw_to_pcm16(ulaw))
    loud = [s for s in pcm if abs(s) > 64] or pcm
    current = math.sqrt(sum(s * s for s in loud) / len(loud)) or 1.0
    gain = target_rms / current
    return pcm16_to_ulaw(_pack([s * gain for s in pcm]))


def speech_level(ulaw: bytes) -> float:
    """The RMS of a recording's non-silent part (what `at_level` aims at)."""
    pcm = _unpack(ulaw_to_pcm16(ulaw))
    loud = [s for s in pcm if abs(s) > 64] or pcm
    return math.sqrt(sum(s * s for s in loud) / len(loud))


def attenuate(ulaw: bytes, db: float) -> bytes:
    """The audio `db` dB quieter."""
    return at_level(ulaw, speech_level(ulaw) / (10 ** (db / 20)))


def _lowpass(samples: list[float], alpha: float) -> list[float]:
    out, y = [], 0.0
    for s in samples:
        y += alpha * (s - y)
        out.append(y)
    return out


def cough(seed: int = 1, ms: int = 350) -> bytes:
    """A burst of band-limited noise with a sharp attack and a decaying tail."""
    rng = random.Random(seed)
    n = ms * RATE // 1000
    noise = _lowpass([rng.gauss(0, 1) for _ in range(n)], 0.45)
    envelope = [
        min(1.0, i / (0.015 * RATE)) * math.exp(-i / (0.12 * RATE)) for i in range(n)
    ]
    return pcm16_to_ulaw(_pack([10000 * a * b for a, b in zip(noise, envelope, strict=True)]))


def knock(seed: int = 2, count: int = 3, gap_ms: int = 140) -> bytes:
    """Knocks on a door: short resonant thumps."""
    rng = random.Random(seed)
    out: list[float] = []
    for _ in range(count):
        freq = 180 + rng.uniform(-20, 20)
        thump = [
            math.sin(2 * math.pi * freq * i / RATE) * math.exp(-i / (0.012 * RATE)) * 20000
            + rng.gauss(0, 800) * math.exp(-i / (0.004 * RATE))
            for i in range(int(0.06 * RATE))
        ]
        out += thump + [0.0] * (gap_ms * RATE // 1000)
    return pcm16_to_ulaw(_pack(out))


def breath(seed: int = 3, ms: int = 600) -> bytes:
    """A breath: soft low-passed noise rising and falling."""
    rng = random.Random(seed)
    n = ms * RATE // 1000
    noise = _lowpass([rng.gauss(0, 1) for _ in range(n)], 0.25)
    envelope = [math.sin(math.pi * i / n) ** 2 for i in range(n)]
    return pcm16_to_ulaw(_pack([6000 * a * b for a, b in zip(noise, envelope, strict=True)]))


def hiss(seed: int = 4, ms: int = 500) -> bytes:
    """A burst of line hiss: white noise, flat."""
    rng = random.Random(seed)
    return pcm16_to_ulaw(_pack([rng.gauss(0, 3000) for _ in range(ms * RATE // 1000)]))


def loudness(ulaw: bytes) -> int:
    """PCM RMS of the whole clip."""
    return rms(ulaw_to_pcm16(ulaw))
