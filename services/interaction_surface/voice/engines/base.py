"""Speech engine interfaces: the ports a call talks to, and helpers over any engine.

- `TextToSpeech.stream(text)` yields μ-law 8 kHz chunks as they are synthesized, so the
  first audio reaches the call before the whole sentence is rendered.
- `SpeechToText.session()` returns a `Recognizer` fed PCM16 8 kHz frames as they arrive;
  `finish()` gives the utterance's final text; a cloud recognizer (`StreamingRecognizer`)
  is awaited for it instead (`final_text`). A `ScoredRecognizer` also gives each word's
  confidence (`words()`); `SpeechToText` may name the values it can recognise
  (`known_values`, e.g. a catalogue of resource names) so a call can doubt the others.

Engines live beside this module (espeak.py, pocketsphinx.py, deepgram.py) and import only
it; the name → engine registry is registry.py, so no engine imports another.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, runtime_checkable

from ..floor import Word


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


async def synthesize(tts: TextToSpeech, text: str) -> bytes:
    """The whole utterance at once (tests, benchmarks)."""
    return b"".join([chunk async for chunk in tts.stream(text)])
