"""Voice activity detection and endpointing: a state machine fed 20 ms frames and a clock.

webrtcvad classifies each frame as voiced or not; on top of that:
- a turn (or a barge-in) starts only after `min_speech_ms` of voiced frames in a row,
  so a cough or a click shorter than that never interrupts the agent;
- it ends after `endpoint_silence_ms` of unvoiced frames (endpointing);
- a frame quieter than `min_rms` is never voiced: webrtcvad smooths its decisions and keeps
  saying "voiced" for a few frames after a click, which would stretch a blip past the
  minimum (measured in bench/voice.py).
Aggressive settings answer sooner but cut phrases and fire on noise; conservative ones
protect the turn and add delay. That trade-off is product policy, hence configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import webrtcvad

from libs.config import env_int

from .codec import FRAME_MS, PCM_FRAME_BYTES, RATE, rms

Classifier = Callable[[bytes], bool]


@dataclass(frozen=True, slots=True)
class VadConfig:
    """`HOLDLINE_VAD_AGGRESSIVENESS` (0-3, 2), `HOLDLINE_VAD_MIN_SPEECH_MS` (60),
    `HOLDLINE_VAD_ENDPOINT_MS` (500), `HOLDLINE_VAD_MIN_RMS` (200, PCM16 units),
    `HOLDLINE_FALSE_INTERRUPTION_MS` (600; 0 turns resuming off)."""

    aggressiveness: int = 2
    min_speech_ms: int = 60
    endpoint_silence_ms: int = 500
    min_rms: int = 200
    # A barge-in with no words, followed by this much quiet, was a false interruption.
    false_interruption_ms: int = 600

    def __post_init__(self) -> None:
        if not 0 <= self.aggressiveness <= 3:
            raise ValueError("VAD aggressiveness must be 0..3")
        if self.min_speech_ms < FRAME_MS or self.endpoint_silence_ms < FRAME_MS:
            raise ValueError(f"VAD durations must be at least one frame ({FRAME_MS} ms)")
        if self.false_interruption_ms < 0:
            raise ValueError("the false interruption window cannot be negative")

    @classmethod
    def from_env(cls) -> VadConfig:
        """Read the configuration."""
        return cls(
            aggressiveness=env_int("HOLDLINE_VAD_AGGRESSIVENESS", 2),
            min_speech_ms=env_int("HOLDLINE_VAD_MIN_SPEECH_MS", 60),
            endpoint_silence_ms=env_int("HOLDLINE_VAD_ENDPOINT_MS", 500),
            min_rms=env_int("HOLDLINE_VAD_MIN_RMS", 200),
            false_interruption_ms=env_int("HOLDLINE_FALSE_INTERRUPTION_MS", 600),
        )


@dataclass(frozen=True, slots=True)
class VadEvent:
    """`started`: speech confirmed; `first_voiced_ms` is when its first voiced frame came in.
    `stopped`: the endpointing window elapsed after the last voiced frame."""

    kind: Literal["started", "stopped"]
    at_ms: int
    first_voiced_ms: int


def webrtc_classifier(aggressiveness: int, min_rms: int = 0) -> Classifier:
    """webrtcvad on 20 ms PCM16 frames at 8 kHz, gated by loudness."""
    vad = webrtcvad.Vad(aggressiveness)

    def classify(frame: bytes) -> bool:
        # Always fed, so webrtcvad's own state follows the whole stream.
        voiced = bool(vad.is_speech(frame, RATE))
        return voiced and rms(frame) >= min_rms

    return classify


class VoiceActivity:
    """Feeds frames, emits `started`/`stopped`. Time comes from the caller (stream ms)."""

    def __init__(self, config: VadConfig, classifier: Classifier | None = None) -> None:
        self.config = config
        self._classify = classifier or webrtc_classifier(config.aggressiveness, config.min_rms)
        self.speaking = False
        self._run_start: int | None = None
        self._last_voiced: int | None = None

    def feed(self, frame: bytes, now_ms: int) -> VadEvent | None:
        """One 20 ms PCM16 frame ending at `now_ms`; a short frame counts as silence."""
        voiced = len(frame) == PCM_FRAME_BYTES and self._classify(frame)
        if voiced:
            if self._run_start is None:
                self._run_start = now_ms - FRAME_MS
            self._last_voiced = now_ms
            if not self.speaking and now_ms - self._run_start >= self.config.min_speech_ms:
                self.speaking = True
                return VadEvent("started", now_ms, self._run_start)
            return None
        if not self.speaking:
            # A voiced run shorter than the minimum was a blip: forget it.
            self._run_start = None
            return None
        last = self._last_voiced if self._last_voiced is not None else now_ms
        if now_ms - last >= self.config.endpoint_silence_ms:
            first = self._run_start if self._run_start is not None else last
            self.speaking = False
            self._run_start = None
            return VadEvent("stopped", now_ms, first)
        return None
