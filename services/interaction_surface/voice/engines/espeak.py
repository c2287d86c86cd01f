"""espeak-ng text-to-speech, streamed and resampled to the call's 8 kHz μ-law."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import struct
from collections.abc import AsyncIterator

from ..codec import RATE, Resampler, pcm16_to_ulaw
from .base import SpeechError

# espeak-ng writes a RIFF header with placeholder sizes when streaming to stdout.
_WAV_HEADER = 44
_CHUNK_BYTES = 4096


class EspeakTts:
    """espeak-ng (Debian package `espeak-ng`), resampled from its 22.05 kHz to 8 kHz μ-law.

    `HOLDLINE_TTS_VOICE` (`en-us`) and `HOLDLINE_TTS_WPM` (175).
    """

    def __init__(self, voice: str = "en-us", wpm: int = 175, binary: str = "espeak-ng") -> None:
        found = shutil.which(binary)
        if found is None:
            raise SpeechError(f"{binary} is not installed (scripts/ensure-system-deps.sh)")
        self._binary = found
        self._voice = voice
        self._wpm = wpm

    async def stream(self, text: str) -> AsyncIterator[bytes]:
        """Synthesize `text`, yielding μ-law chunks as espeak-ng writes them."""
        proc = await asyncio.create_subprocess_exec(
            self._binary, "--stdout", "-v", self._voice, "-s", str(self._wpm), "--", text,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        assert proc.stdout is not None
        try:
            header = await proc.stdout.readexactly(_WAV_HEADER)
            rate = _wav_rate(header)
            resampler = Resampler(rate, RATE)
            while chunk := await proc.stdout.read(_CHUNK_BYTES):
                converted = resampler.convert(chunk)
                if converted:
                    yield pcm16_to_ulaw(converted)
            await proc.wait()
        except asyncio.IncompleteReadError as exc:
            raise SpeechError(f"espeak-ng produced no audio for {text!r}") from exc
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


def _wav_rate(header: bytes) -> int:
    if header[:4] != b"RIFF" or header[8:12] != b"WAVE":
        raise SpeechError("espeak-ng did not write WAV")
    channels, rate = struct.unpack_from("<HI", header, 22)
    bits = struct.unpack_from("<H", header, 34)[0]
    if channels != 1 or bits != 16:
        raise SpeechError(f"unexpected espeak-ng format: {channels} ch, {bits} bit")
    return int(rate)
