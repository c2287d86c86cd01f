"""Speech engines behind two small interfaces; offline engines by default.

- `TextToSpeech.stream(text)` yields μ-law 8 kHz chunks as they are synthesized, so the
  first audio reaches the call before the whole sentence is rendered.
- `SpeechToText.session()` returns a `Recognizer` fed PCM16 8 kHz frames as they arrive;
  `finish()` gives the utterance's final text; a cloud recognizer (`StreamingRecognizer`)
  is awaited for it instead (`final_text`). A `ScoredRecognizer` also gives each word's
  confidence (`words()`); `SpeechToText` may name the values it can recognise
  (`known_values`, e.g. a catalogue of resource names) so a call can doubt the others.

Engines are chosen by name (`HOLDLINE_TTS`, `HOLDLINE_STT`) from a registry, so a cloud
engine plugs in with `register_tts` / `register_stt` from a user's module. `deepgram`
(cloud_speech.py) is built in for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import struct
from collections.abc import AsyncIterator, Callable
from typing import Protocol, runtime_checkable

from libs.config import env_int, env_str

from .codec import RATE, Resampler, pcm16_to_ulaw
from .floor import Word

# espeak-ng writes a RIFF header with placeholder sizes when streaming to stdout.
_WAV_HEADER = 44
_CHUNK_BYTES = 4096


class SpeechError(Exception):
    """An engine could not produce or recognise speech."""


class TextToSpeech(Protocol):
    """Text → μ-law 8 kHz audio, streamed."""

    def stream(self, text: str) -> AsyncIterator[bytes]:
        """Chunks of μ-law audio in order; cancelling the iteration stops synthesis."""
        ...


class Recognizer(Protocol):
    """One utterance being recognised as it arrives."""

    def feed(self, pcm16_8k: bytes) -> None:
        """More audio of the utterance (PCM16, 8 kHz, mono)."""

    def finish(self) -> str:
        """The final transcript ('' when nothing was recognised)."""
        ...


@runtime_checkable
class StreamingRecognizer(Recognizer, Protocol):
    """A recognizer whose transcript comes from elsewhere (a cloud stream) and may lag."""

    async def final(self) -> str:
        """End the utterance and wait, bounded, for its last results."""
        ...


@runtime_checkable
class ScoredRecognizer(Recognizer, Protocol):
    """A recognizer that says how sure it is of each word of its final transcript."""

    def words(self) -> list[Word]:
        """The final transcript's words with their confidence (0-1), after `finish`/`final`."""
        ...


def heard_words(recognizer: Recognizer, text: str) -> list[Word]:
    """The transcript's words with confidences; an engine that gives none is taken as sure."""
    if isinstance(recognizer, ScoredRecognizer):
        scored = recognizer.words()
        if scored:
            return scored
    return [Word(w, 1.0) for w in text.split()]


async def final_text(recognizer: Recognizer) -> str:
    """The utterance's transcript; a streaming engine gets to deliver its last results."""
    if isinstance(recognizer, StreamingRecognizer):
        return await recognizer.final()
    return recognizer.finish()


class SpeechToText(Protocol):
    """Audio → text, one recognizer per utterance."""

    def session(self) -> Recognizer:
        """A recognizer for a new utterance."""
        ...


def known_values(stt: SpeechToText | None) -> frozenset[str]:
    """The argument values an engine knows (empty: it can hear anything)."""
    found = getattr(stt, "known_values", None)
    return frozenset(found) if isinstance(found, frozenset | set | tuple | list) else frozenset()


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


async def synthesize(tts: TextToSpeech, text: str) -> bytes:
    """The whole utterance at once (tests, benchmarks)."""
    return b"".join([chunk async for chunk in tts.stream(text)])


TtsFactory = Callable[[], TextToSpeech]
SttFactory = Callable[[], SpeechToText]
_TTS: dict[str, TtsFactory] = {}
_STT: dict[str, SttFactory] = {}


def register_tts(name: str, factory: TtsFactory) -> None:
    """Make a TTS engine selectable with `HOLDLINE_TTS=name`."""
    _TTS[name] = factory


def register_stt(name: str, factory: SttFactory) -> None:
    """Make an STT engine selectable with `HOLDLINE_STT=name`."""
    _STT[name] = factory


def tts_from_env() -> TextToSpeech:
    """The TTS engine named by `HOLDLINE_TTS` (`espeak`)."""
    name = env_str("HOLDLINE_TTS", "espeak")
    if name not in _TTS:
        raise SpeechError(f"HOLDLINE_TTS={name!r}: no such engine (have {sorted(_TTS)})")
    return _TTS[name]()


def stt_from_env() -> SpeechToText | None:
    """The STT engine named by `HOLDLINE_STT` (`pocketsphinx`; `none`: no transcription)."""
    name = env_str("HOLDLINE_STT", "pocketsphinx")
    if name == "none":
        return None
    if name not in _STT:
        raise SpeechError(f"HOLDLINE_STT={name!r}: no such engine (have {sorted(_STT)})")
    return _STT[name]()


def _deepgram_tts() -> TextToSpeech:
    from .cloud_speech import DeepgramTts  # noqa: PLC0415 - imports this module

    return DeepgramTts.from_env()


def _deepgram_stt() -> SpeechToText:
    from .cloud_speech import DeepgramStt  # noqa: PLC0415 - imports this module

    return DeepgramStt.from_env()


register_tts("deepgram", _deepgram_tts)
register_stt("deepgram", _deepgram_stt)
register_tts(
    "espeak",
    lambda: EspeakTts(
        voice=env_str("HOLDLINE_TTS_VOICE", "en-us"), wpm=env_int("HOLDLINE_TTS_WPM", 175)
    ),
)
