"""Voice activity detection and endpointing: a state machine fed 20 ms frames and a clock.

Two detectors, `HOLDLINE_VAD_DETECTOR`:

- `silero` (default): webrtcvad (gated by loudness) finds a *candidate* fast; Silero VAD's
  ONNX model (run with onnxruntime, from the silero-vad wheel's own file) then decides
  whether it is speech, and a level check decides whether it is the caller's:
    * `suspected` after `min_speech_ms` of webrtcvad-voiced frames: the call stops sending
      its audio but flushes nothing yet;
    * `started` (confirmed) once Silero has heard `confirm_ms` of speech in the run and the
      run is within `level_db` of the caller's own speech level (measured on their
      confirmed turns: background talk well below the caller is not the caller);
    * or `started` at once when the run's first `min_speech_ms` of voiced frames have a
      sibilant's spectrum (see `sibilant_onset`): Silero hears an "s" as non-speech for
      three or four windows, which alone put barge-in p99 at 153 ms;
    * `rejected` when the run ends, or `confirm_window_ms` passes, without that: a cough,
      a knock, a breath, line hiss. The call carries on sending where it stopped.
  Energy says "something", the model says "speech"; the first is a 20 ms decision, the
  second needs two or three 32 ms windows. Holding (not clearing) in between is what makes
  the wait cheap: a false alarm costs a short gap, not the rest of the sentence.
- `webrtc`: the previous detector; voiced = webrtcvad and RMS ≥ `min_rms`, `started` after
  `min_speech_ms` of voiced frames in a row. Fastest, but every voiced noise is speech.

Either way a turn ends after `endpoint_silence_ms` of unvoiced frames (endpointing), and
a frame quieter than `min_rms` is never voiced (webrtcvad's smoothing would otherwise
stretch a 20 ms click past the minimum, measured in bench/voice.py). Aggressive settings
answer sooner but fire on noise; conservative ones add delay: product policy, so config.

The detector's parts are tuned together on one bench: the Silero stream is `silero`, the
onset spectrum and the caller's level are `speech_cues`; this is the state machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import webrtcvad

from .codec import FRAME_MS, PCM_FRAME_BYTES, RATE, rms
from .silero import WINDOW_MS, SileroStream
from .speech_cues import CallerLevel, level_db, power_spectrum, sibilant_onset

Classifier = Callable[[bytes], bool]
DETECTORS = ("silero", "webrtc")
# A suspected run survives unvoiced frames up to this long (speech has short stops).
_RUN_GAP_MS = 60


@dataclass(frozen=True, slots=True)
class VadConfig:
    """`HOLDLINE_VAD_DETECTOR` (`silero`|`webrtc`), `HOLDLINE_VAD_AGGRESSIVENESS` (0-3, 2),
    `HOLDLINE_VAD_MIN_SPEECH_MS` (60), `HOLDLINE_VAD_ENDPOINT_MS` (500),
    `HOLDLINE_VAD_MIN_RMS` (200, PCM16 units), `HOLDLINE_FALSE_INTERRUPTION_MS` (600; 0 turns
    resuming off), `HOLDLINE_VAD_SPEECH_PROB` (0.5), `HOLDLINE_VAD_CONFIRM_MS` (32),
    `HOLDLINE_VAD_CONFIRM_WINDOW_MS` (160), `HOLDLINE_VAD_LEVEL_DB` (8; 0 turns it off),
    `HOLDLINE_VAD_SIBILANT_HIGH` (0.70; 0 turns the sibilant rule off),
    `HOLDLINE_VAD_SIBILANT_FLATNESS` (0.72)."""

    # webrtc VAD aggressiveness, 0-3.
    aggressiveness: int = 2
    # Speech needed before a run counts as the caller talking.
    min_speech_ms: int = 60
    # Silence that ends an utterance.
    endpoint_silence_ms: int = 500
    # Quietest audio (PCM16 units) that may count as speech.
    min_rms: int = 200
    # A barge-in with no words, followed by this much quiet, was a false interruption.
    false_interruption_ms: int = 600
    # `silero` or `webrtc`.
    detector: str = "silero"
    # Silero's probability at or above which a 32 ms window is speech.
    speech_prob: float = 0.5
    # Speech Silero must hear in a run before it is the caller talking.
    confirm_ms: int = 32
    # A suspicion not confirmed this long after its first voiced frame is a false alarm.
    confirm_window_ms: int = 160
    # A run more than this many dB below the caller's own speech level is not the caller.
    level_db: float = 8.0
    # Sibilant onset: share of the onset's energy at or above 2 kHz, at least this...
    sibilant_high: float = 0.70
    # ...and a spectrum less flat than this (white line hiss is flat, about 0.8).
    sibilant_flatness: float = 0.72
    # `HOLDLINE_VAD_MODEL_PATH`: the Silero ONNX file; empty: the one the wheel ships.
    model_path: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.aggressiveness <= 3:
            raise ValueError("VAD aggressiveness must be 0..3")
        if self.min_speech_ms < FRAME_MS or self.endpoint_silence_ms < FRAME_MS:
            raise ValueError(f"VAD durations must be at least one frame ({FRAME_MS} ms)")
        if self.false_interruption_ms < 0:
            raise ValueError("the false interruption window cannot be negative")
        if self.detector not in DETECTORS:
            raise ValueError(f"HOLDLINE_VAD_DETECTOR must be one of {DETECTORS}")
        if not 0 < self.speech_prob < 1 or self.confirm_ms < 0 or self.level_db < 0:
            raise ValueError("speech probability in (0, 1), confirm_ms and level_db >= 0")
        if not 0 <= self.sibilant_high < 1 or not 0 < self.sibilant_flatness <= 1:
            raise ValueError("sibilant_high in [0, 1), sibilant_flatness in (0, 1]")


@dataclass(frozen=True, slots=True)
class VadEvent:
    """`suspected`: something voiced, not yet known to be the caller's speech.
    `started`: speech confirmed; `first_voiced_ms` is when its first voiced frame came in.
    `rejected`: the suspicion was not speech (or not the caller's).
    `stopped`: the endpointing window elapsed after the last voiced frame."""

    kind: Literal["suspected", "started", "rejected", "stopped"]
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


class SpeechModel(Protocol):
    """A speech/non-speech model over a call's audio (Silero; a script in unit tests)."""

    def feed(self, pcm16: bytes) -> list[float]:
        """The speech probabilities of the windows this audio completed."""
        ...


class VoiceActivity:
    """Feeds frames, emits events. Time comes from the caller (stream ms)."""

    def __init__(
        self,
        config: VadConfig,
        classifier: Classifier | None = None,
        model: SpeechModel | None = None,
    ) -> None:
        self.config = config
        self._classify = classifier or webrtc_classifier(config.aggressiveness, config.min_rms)
        self._silero: SpeechModel | None = None
        if config.detector == "silero":
            self._silero = model if model is not None else SileroStream()
        self.speaking = False
        self.suspected = False
        self.caller = CallerLevel()
        self._run_start: int | None = None
        self._last_voiced: int | None = None
        self._voiced_ms = 0
        self._speech_ms = 0
        self._rejected = False
        self._levels: list[float] = []
        self._turn_levels: list[float] = []
        self._onset: Any = None
        self._sibilant = False

    def _voiced(self, frame: bytes) -> tuple[bool, float]:
        if len(frame) != PCM_FRAME_BYTES:
            return False, -math.inf
        return self._classify(frame), level_db(frame)

    def _below_caller(self, db: float) -> bool:
        """Far below the caller's own level: someone else, or the room."""
        return (
            self._silero is not None
            and self.caller.known
            and self.config.level_db > 0
            and db < self.caller.percentile(0.5) - self.config.level_db
        )

    def feed(self, frame: bytes, now_ms: int) -> VadEvent | None:
        """One 20 ms PCM16 frame ending at `now_ms`; a short frame counts as silence."""
        voiced, db = self._voiced(frame)
        probs = self._silero.feed(frame) if self._silero is not None else []
        if self.speaking:
            return self._endpoint(voiced, db, now_ms)
        if self._silero is None:
            return self._webrtc_only(voiced, now_ms)
        if voiced:
            if self._run_start is None:
                self._run_start = now_ms - FRAME_MS
            self._last_voiced = now_ms
            self._voiced_ms += FRAME_MS
            self._levels.append(db)
            if self._voiced_ms <= self.config.min_speech_ms and self.config.sibilant_high > 0:
                spectrum = power_spectrum(frame)
                self._onset = spectrum if self._onset is None else self._onset + spectrum
                if self._voiced_ms == self.config.min_speech_ms // FRAME_MS * FRAME_MS:
                    self._sibilant = sibilant_onset(
                        self._onset, self.config.sibilant_high, self.config.sibilant_flatness
                    )
        if self._run_start is None:
            return None
        self._speech_ms += WINDOW_MS * sum(p >= self.config.speech_prob for p in probs)
        start = self._run_start
        last = self._last_voiced if self._last_voiced is not None else now_ms
        if now_ms - last > _RUN_GAP_MS:
            # The voiced run ended before it was confirmed.
            was_suspected = self.suspected
            self._reset_run()
            return VadEvent("rejected", now_ms, start) if was_suspected else None
        level = self.caller.verdict(self._levels, self._voiced_ms, self.config.level_db)
        if (
            (self._speech_ms >= max(self.config.confirm_ms, WINDOW_MS) or self._sibilant)
            # Silero's state carries a little past a blip: the minimum still applies.
            and self._voiced_ms >= self.config.min_speech_ms
            and level
        ):
            self.speaking = True
            self.suspected = False
            self._turn_levels = list(self._levels)
            return VadEvent("started", now_ms, start)
        if (
            not self.suspected
            and not self._rejected
            and self._voiced_ms >= self.config.min_speech_ms
            # Holding the agent for something quieter than the caller makes it stutter
            # through background talk: only a run at the caller's level is suspected.
            and level is True
        ):
            self.suspected = True
            return VadEvent("suspected", now_ms, start)
        if self.suspected and (
            level is False or now_ms - start >= self.config.confirm_window_ms
        ):
            # Not speech, or not the caller: carry on; a later confirmation still counts.
            self.suspected = False
            self._rejected = True
            return VadEvent("rejected", now_ms, start)
        return None

    def _reset_run(self) -> None:
        self._run_start = None
        self._last_voiced = None
        self._voiced_ms = 0
        self._speech_ms = 0
        self.suspected = False
        self._rejected = False
        self._levels = []
        self._onset = None
        self._sibilant = False

    def _webrtc_only(self, voiced: bool, now_ms: int) -> VadEvent | None:
        if not voiced:
            # A voiced run shorter than the minimum was a blip: forget it.
            self._run_start = None
            return None
        if self._run_start is None:
            self._run_start = now_ms - FRAME_MS
        self._last_voiced = now_ms
        if now_ms - self._run_start >= self.config.min_speech_ms:
            self.speaking = True
            return VadEvent("started", now_ms, self._run_start)
        return None

    def _endpoint(self, voiced: bool, db: float, now_ms: int) -> VadEvent | None:
        if voiced and not self._below_caller(db):
            self._last_voiced = now_ms
            self._turn_levels.append(db)
            return None
        last = self._last_voiced if self._last_voiced is not None else now_ms
        if now_ms - last < self.config.endpoint_silence_ms:
            return None
        first = self._run_start if self._run_start is not None else last
        self.speaking = False
        self.caller.add_turn(self._turn_levels)
        self._turn_levels = []
        self._reset_run()
        return VadEvent("stopped", now_ms, first)

