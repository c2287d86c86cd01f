"""The audio edge: every conversion between the call's μ-law and the PCM16 others use.

A call works in μ-law, 8 kHz, mono (Twilio Media Streams carry it as is, in 20 ms frames of
160 bytes). Carriers that stream 16-bit linear PCM (Vonage's L16 at 8 or 16 kHz, Exotel's
8 kHz slin) are converted here, per call, by a `LinearLine`. VAD works on PCM16 at 8 kHz;
STT engines usually want 16 kHz; espeak-ng writes 22.05 kHz WAV.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from typing import Any

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
