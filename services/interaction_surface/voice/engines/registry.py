"""Speech engines chosen by name (`HOLDLINE_TTS`, `HOLDLINE_STT`).

A cloud engine plugs in with `register_tts` / `register_stt` from a user's module
(`HOLDLINE_SPEECH_MODULES`); `espeak` and `deepgram` are built in. This module imports the
engines, never the other way round.
"""

from __future__ import annotations

from collections.abc import Callable

from libs.config import env_int, env_str

from .base import SpeechError, SpeechToText, TextToSpeech
from .deepgram import DeepgramStt, DeepgramTts
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
    return DeepgramTts.from_env()


def _deepgram_stt() -> SpeechToText:
    return DeepgramStt.from_env()


register_tts("deepgram", _deepgram_tts)
register_stt("deepgram", _deepgram_stt)
register_tts(
    "espeak",
    lambda: EspeakTts(
        voice=env_str("HOLDLINE_TTS_VOICE", "en-us"), wpm=env_int("HOLDLINE_TTS_WPM", 175)
    ),
)
