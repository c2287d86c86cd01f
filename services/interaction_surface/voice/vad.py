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

Over 400 lines because the detector's parts (webrtcvad gate, Silero stream, spectrum,
caller level, the state machine) are one decision and are tuned together on one bench.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
import webrtcvad

from .codec import FRAME_MS, PCM_FRAME_BYTES, RATE, rms

Classifier = Callable[[bytes], bool]
DETECTORS = ("silero", "webrtc")
# Silero at 8 kHz: 256-sample windows (32 ms), each preceded by the previous 32 samples.
_WINDOW = 256
_CONTEXT = 32
WINDOW_MS = _WINDOW * 1000 // RATE
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

    aggressiveness: int = 2
    min_speech_ms: int = 60
    endpoint_silence_ms: int = 500
    min_rms: int = 200
    # A barge-in with no words, followed by this much quiet, was a false interruption.
    false_interruption_ms: int = 600
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


class SileroUnavailable(Exception):
    """The Silero model file or onnxruntime is missing."""


def silero_model_path(explicit: str = "") -> Path:
    """`explicit` (`VadConfig.model_path`), else the ONNX file the installed silero-vad
    wheel ships.

    Found through the distribution's metadata, so the package (which imports torch) is
    never imported, and nothing is downloaded.
    """
    if explicit:
        path = Path(explicit)
    else:
        try:
            dist = metadata.distribution("silero-vad")
        except metadata.PackageNotFoundError:
            raise SileroUnavailable(
                "silero-vad is not installed (scripts/ensure-venv.sh installs it)"
            ) from None
        path = Path(str(dist.locate_file("silero_vad/data/silero_vad.onnx")))
    if not path.is_file():
        raise SileroUnavailable(f"no Silero model at {path}")
    return path


_loaded: list[Any] = []


def _session(model_path: str = "") -> Any:
    """One inference session per process: the model's recurrent state is an input, so
    every call keeps its own state and shares the session. The first load's file wins."""
    if not _loaded:
        _loaded.append(_open_session(model_path))
    return _loaded[0]


def _open_session(model_path: str) -> Any:
    try:
        import onnxruntime  # noqa: PLC0415 - only the silero detector needs it
    except ImportError as exc:
        raise SileroUnavailable("onnxruntime is not installed") from exc
    options = onnxruntime.SessionOptions()
    # Two cores serve every call of the process: one thread each, no spinning.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(silero_model_path(model_path)), sess_options=options, providers=["CPUExecutionProvider"]
    )


def load_silero(model_path: str = "") -> None:
    """Load the model now (start-up), so a missing file fails the start, not a call."""
    _session(model_path)


class SileroStream:
    """Silero VAD over one call's audio: PCM16 8 kHz in, a speech probability per 32 ms."""

    def __init__(self) -> None:
        self._session = _session()
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._context = np.zeros(_CONTEXT, dtype=np.float32)
        self._pending = np.zeros(0, dtype=np.float32)
        self._sr = np.array(RATE, dtype=np.int64)

    def feed(self, pcm16: bytes) -> list[float]:
        """The probabilities of every window this audio completed (often none or one)."""
        samples = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) / 32768.0
        self._pending = np.concatenate((self._pending, samples))
        out: list[float] = []
        while len(self._pending) >= _WINDOW:
            window, self._pending = self._pending[:_WINDOW], self._pending[_WINDOW:]
            x = np.concatenate((self._context, window))[np.newaxis, :]
            prob, self._state = self._session.run(
                None, {"input": x, "state": self._state, "sr": self._sr}
            )
            self._context = window[-_CONTEXT:]
            out.append(float(prob[0][0]))
        return out


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


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return -math.inf
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]
