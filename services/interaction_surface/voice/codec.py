"""The audio edge: every conversion between the call's μ-law and the PCM16 others use.

A call works in μ-law, 8 kHz, mono (Twilio Media Streams carry it as is, in 20 ms frames of
160 bytes). Carriers that stream 16-bit linear PCM (Vonage's L16 at 8 or 16 kHz, Exotel's
8 kHz slin) are converted here, per call, by a `LinearLine`. A WebRTC peer sends and
receives 48 kHz PCM16 (Opus, decoded by the media stack; PCMU is decoded to 8 kHz):
`WebRtcUp` and `WebRtcDown` convert between it and the call's 8 kHz μ-law. VAD works on
PCM16 at 8 kHz; STT engines usually want 16 kHz; espeak-ng writes 22.05 kHz WAV.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

from av import AudioFrame, AudioResampler

if sys.version_info >= (3, 13):
    import audioop  # provided by the audioop-lts package
else:
    # The standard module warns about its 3.13 removal; audioop-lts replaces it there.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop

RATE = 8000
FRAME_MS = 20
ULAW_FRAME_BYTES = RATE * FRAME_MS // 1000
PCM_FRAME_BYTES = ULAW_FRAME_BYTES * 2
SAMPLE_WIDTH = 2


def ulaw_to_pcm16(data: bytes) -> bytes:
    """μ-law bytes → little-endian signed 16-bit samples."""
    return audioop.ulaw2lin(data, SAMPLE_WIDTH)


def pcm16_to_ulaw(data: bytes) -> bytes:
    """16-bit samples → μ-law bytes (an odd trailing byte is dropped)."""
    return audioop.lin2ulaw(data[: len(data) - len(data) % 2], SAMPLE_WIDTH)


def ulaw_ms(data: bytes | int) -> int:
    """Duration of μ-law audio at 8 kHz, in milliseconds."""
    size = data if isinstance(data, int) else len(data)
    return size * 1000 // RATE


def pcm16_ms(data: bytes, rate: int = RATE) -> int:
    """Duration of PCM16 audio at `rate`, in milliseconds."""
    return len(data) // SAMPLE_WIDTH * 1000 // rate


def rms(pcm16: bytes) -> int:
    """Loudness of PCM16 audio (0 for silence)."""
    return int(audioop.rms(pcm16, SAMPLE_WIDTH)) if pcm16 else 0


def silence_ulaw(ms: int) -> bytes:
    """μ-law silence of `ms` milliseconds."""
    return b"\xff" * (RATE * ms // 1000)


@dataclass
class Resampler:
    """A streaming sample-rate converter (keeps filter state between chunks)."""

    from_rate: int
    to_rate: int
    _state: Any = field(default=None, repr=False)
    _carry: bytes = field(default=b"", repr=False)

    def convert(self, pcm16: bytes) -> bytes:
        """Convert one chunk; an odd trailing byte waits for the next chunk."""
        data = self._carry + pcm16
        cut = len(data) - len(data) % SAMPLE_WIDTH
        data, self._carry = data[:cut], data[cut:]
        if self.from_rate == self.to_rate or not data:
            return data
        out, self._state = audioop.ratecv(
            data, SAMPLE_WIDTH, 1, self.from_rate, self.to_rate, self._state
        )
        return bytes(out)


def resample(pcm16: bytes, from_rate: int, to_rate: int) -> bytes:
    """Convert a whole buffer between sample rates."""
    return Resampler(from_rate, to_rate).convert(pcm16)


def upsample_8k_to_16k(pcm16: bytes) -> bytes:
    """What a 16 kHz STT engine needs from telephone audio."""
    return resample(pcm16, RATE, 16000)


def downsample_16k_to_8k(pcm16: bytes) -> bytes:
    """What the phone needs from a 16 kHz engine."""
    return resample(pcm16, 16000, RATE)


class LinearLine:
    """One call's conversion between a carrier's 16-bit little-endian linear PCM at `rate`
    and the call's μ-law 8 kHz, both ways, each direction keeping its own filter state."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._inbound = Resampler(rate, RATE)
        self._outbound = Resampler(RATE, rate)

    def to_ulaw(self, pcm16: bytes) -> bytes:
        """Caller audio from the carrier, as the call hears it."""
        return pcm16_to_ulaw(self._inbound.convert(pcm16))

    def from_ulaw(self, ulaw: bytes) -> bytes:
        """The agent's audio, as the carrier plays it."""
        return self._outbound.convert(ulaw_to_pcm16(ulaw))

    def pcm_bytes(self, ms: int) -> int:
        """How many bytes `ms` of audio is on the carrier's side."""
        return self.rate * ms // 1000 * SAMPLE_WIDTH


class FrameSplitter:
    """Cuts an arbitrary stream of bytes into fixed-size frames, keeping the remainder."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._buffer = bytearray()

    def push(self, data: bytes) -> list[bytes]:
        """Append data and return every complete frame."""
        self._buffer.extend(data)
        count = len(self._buffer) // self._size
        frames = [
            bytes(self._buffer[i * self._size : (i + 1) * self._size]) for i in range(count)
        ]
        del self._buffer[: count * self._size]
        return frames

    def flush(self, pad: int = 0) -> bytes:
        """What is left, padded to a whole frame with `pad` bytes (empty if nothing is left)."""
        if not self._buffer:
            return b""
        rest = bytes(self._buffer) + bytes([pad]) * (self._size - len(self._buffer))
        self._buffer.clear()
        return rest


# A WebRTC peer's audio rate (Opus) and one 20 ms mono PCM16 frame of it.
WEBRTC_RATE = 48000
WEBRTC_FRAME_SAMPLES = WEBRTC_RATE * FRAME_MS // 1000
WEBRTC_FRAME_BYTES = WEBRTC_FRAME_SAMPLES * SAMPLE_WIDTH


def _av_frame(pcm16: bytes, rate: int, channels: int) -> Any:
    """PCM16 (interleaved when stereo) as a frame for the resampler."""
    layout = "stereo" if channels == 2 else "mono"
    frame = AudioFrame(format="s16", layout=layout, samples=len(pcm16) // (2 * channels))
    frame.planes[0].update(pcm16)
    frame.sample_rate = rate
    return frame


class _AvResampler:
    """libswresample (PyAV) to mono PCM16 at `rate`: band-limited, unlike `audioop.ratecv`,
    so 48 kHz audio loses nothing the recognizer hears and gains no aliasing."""

    def __init__(self, rate: int) -> None:
        self._rate = rate
        self._resampler = AudioResampler(format="s16", layout="mono", rate=rate)

    def convert(self, pcm16: bytes, rate: int, channels: int) -> bytes:
        if not pcm16:
            return b""
        out = self._resampler.resample(_av_frame(pcm16, rate, channels))
        return b"".join(bytes(f.planes[0])[: f.samples * SAMPLE_WIDTH] for f in out)


class WebRtcUp:
    """The call's 8 kHz μ-law → 48 kHz mono PCM16 for a WebRTC track (streaming)."""

    def __init__(self) -> None:
        self._resampler = _AvResampler(WEBRTC_RATE)

    def convert(self, ulaw: bytes) -> bytes:
        """One piece of the agent's audio at the peer's rate."""
        return self._resampler.convert(ulaw_to_pcm16(ulaw), RATE, 1)

    def reset(self) -> None:
        """Forget the filter state (the queued audio was dropped)."""
        self._resampler = _AvResampler(WEBRTC_RATE)


class WebRtcDown:
    """A WebRTC peer's decoded PCM16 (any rate, mono or interleaved stereo) → 8 kHz μ-law
    for the call (streaming)."""

    def __init__(self) -> None:
        self._resampler = _AvResampler(RATE)

    def convert(self, pcm16: bytes, rate: int, channels: int) -> bytes:
        """One decoded frame as the call's audio."""
        if channels not in (1, 2):
            raise ValueError(f"unsupported channel count {channels}")
        whole = len(pcm16) - len(pcm16) % (SAMPLE_WIDTH * channels)
        return pcm16_to_ulaw(self._resampler.convert(pcm16[:whole], rate, channels))
