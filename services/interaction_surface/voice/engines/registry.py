"""Speech engines chosen by name (`HOLDLINE_TTS`, `HOLDLINE_STT`, read in `VoiceSettings`).

A cloud engine plugs in with `register_tts` / `register_stt` from a user's module
(`HOLDLINE_SPEECH_MODULES`); `espeak` and `deepgram` are built in (wiring.py registers
espeak-ng with its configured voice, Deepgram with its `VoiceSettings.deepgram` and
pocketsphinx with its primer). This module imports the engines, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import SpeechError, SpeechToText, TextToSpeech
from .espeak import EspeakTts

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


def tts_named(name: str) -> TextToSpeech:
    """The TTS engine named by `HOLDLINE_TTS` (`espeak`)."""
    if name not in _TTS:
        raise SpeechError(f"HOLDLINE_TTS={name!r}: no such engine (have {sorted(_TTS)})")
    return _TTS[name]()


def stt_named(name: str) -> SpeechToText | None:
    """The STT engine named by `HOLDLINE_STT` (`pocketsphinx`; `none`: no transcription)."""
    if name == "none":
        return None
    if name not in _STT:
        raise SpeechError(f"HOLDLINE_STT={name!r}: no such engine (have {sorted(_STT)})")
    return _STT[name]()


register_tts("espeak", EspeakTts)
