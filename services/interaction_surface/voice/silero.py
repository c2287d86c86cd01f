"""Silero VAD (its ONNX model, run with onnxruntime): a speech probability per 32 ms window.

The model is the one file the silero-vad wheel ships (or `HOLDLINE_VAD_MODEL_PATH`); it is
loaded once per process, and every call keeps its own recurrent state (`SileroStream`).
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from .codec import RATE

# Silero at 8 kHz: 256-sample windows (32 ms), each preceded by the previous 32 samples.
_WINDOW = 256
_CONTEXT = 32
WINDOW_MS = _WINDOW * 1000 // RATE


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
