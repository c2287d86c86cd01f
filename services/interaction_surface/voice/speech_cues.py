"""What the VAD weighs beside the models: an onset's spectrum (is it a sibilant?) and the
caller's own speech level (is this run the caller, or the room?)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .codec import PCM_FRAME_BYTES, RATE, rms

_HANN = np.hanning(PCM_FRAME_BYTES // 2)
_FREQS = np.fft.rfftfreq(PCM_FRAME_BYTES // 2, 1 / RATE)
# Below 100 Hz is hum and DC, not the sound's shape.
_BAND = _FREQS >= 100
_HIGH = _FREQS[_BAND] >= 2000


def power_spectrum(pcm16: bytes) -> Any:
    """A 20 ms frame's power spectrum (Hann window), summed over a run's onset."""
    x = np.frombuffer(pcm16, dtype="<i2").astype(np.float64)
    return np.abs(np.fft.rfft((x - x.mean()) * _HANN)) ** 2


def sibilant_onset(spectrum: Any, high: float, flatness: float) -> bool:
    """Whether an onset's summed spectrum is a sibilant's ("s", "sh"): most energy at or
    above 2 kHz, and peaked rather than flat. Measured (bench/voice.py stimuli, every
    three-frame run of 40 seeds): white hiss reaches 0.67 high with flatness >= 0.78;
    cough, breath and knock stay below 0.34 high; an espeak "s" is 0.74 high, 0.65 flat."""
    if high <= 0:
        return False
    band = np.asarray(spectrum, dtype=np.float64)[_BAND] + 1e-9
    total = float(band.sum())
    share = float(band[_HIGH].sum()) / total
    flat = float(np.exp(np.mean(np.log(band)))) / (total / len(band))
    return share >= high and flat <= flatness


def level_db(pcm16: bytes) -> float:
    """A frame's level in dB of PCM16 RMS (-inf for digital silence)."""
    value = rms(pcm16)
    return 20 * math.log10(value) if value > 0 else -math.inf


# Frames of the caller's confirmed speech kept for their level (about 20 s of speech).
_LEVEL_FRAMES = 1000
# The median of a run is compared only over this much of it (shorter is too noisy).
_LEVEL_RUN_MS = 200
# A run whose loudest frame is within `level_db - _PEAK_SLACK_DB` of the caller's usual
# peak (their 80th percentile) is the caller at once; otherwise, once it is long enough,
# its own 80th percentile decides (the median would be biased by the loudness gate, which
# drops the quiet frames of soft talk but not of the caller).
_PEAK_SLACK_DB = 4.0


class CallerLevel:
    """The caller's own speech level, from the frames of their confirmed turns (dB)."""

    def __init__(self) -> None:
        self._frames: list[float] = []

    @property
    def known(self) -> bool:
        """At least one turn of the caller's was measured."""
        return bool(self._frames)

    def add_turn(self, levels: list[float]) -> None:
        """A confirmed turn ended: its voiced frames join the reference."""
        self._frames = (self._frames + [v for v in levels if math.isfinite(v)])[-_LEVEL_FRAMES:]

    def percentile(self, q: float) -> float:
        """The level below which `q` of the caller's frames are."""
        return _percentile(self._frames, q)

    def verdict(self, run: list[float], run_ms: int, margin_db: float) -> bool | None:
        """Is a voiced run the caller? True/False, or None while it is too short to tell."""
        if not self._frames or margin_db <= 0:
            return True
        finite = [v for v in run if math.isfinite(v)]
        if not finite:
            return None
        if max(finite) >= self.percentile(0.8) - (margin_db - _PEAK_SLACK_DB):
            return True
        if run_ms < _LEVEL_RUN_MS:
            return None
        return _percentile(finite, 0.8) >= self.percentile(0.8) - margin_db


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return -math.inf
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]
