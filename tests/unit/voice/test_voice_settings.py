"""`VoiceSettings` reads the voice channel's variables under their documented names."""

from __future__ import annotations

import pytest

from services.interaction_surface.voice.settings import VoiceSettings

_NAMES = (
    "HOLDLINE_TTS", "HOLDLINE_STT", "HOLDLINE_TTS_VOICE", "HOLDLINE_TTS_WPM",
    "HOLDLINE_SPEECH_MODULES", "HOLDLINE_DTMF_PAUSE_MS", "HOLDLINE_PLAYOUT_LEAD_MS",
    "HOLDLINE_CALL_OWNER_TTL_S", "HOLDLINE_FALSE_INTERRUPTION_MS", "HOLDLINE_BACKCHANNEL_CONTINUE",
    "HOLDLINE_REQUIRE_TWILIO_AUTH", "TWILIO_AUTH_TOKEN",
)


def test_defaults_when_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _NAMES:
        monkeypatch.delenv(name, raising=False)
    s = VoiceSettings.from_env()
    assert (s.tts, s.stt, s.tts_voice, s.tts_wpm) == ("espeak", "pocketsphinx", "en-us", 175)
    assert (s.dtmf_pause_ms, s.playout_lead_ms, s.call_owner_ttl_s) == (2000, 160, 10.0)
    assert s.speech_modules == ()
    assert s.vad.false_interruption_ms == 600
    assert s.floor.continue_on_backchannel


def test_every_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "HOLDLINE_TTS": "deepgram", "HOLDLINE_STT": "none", "HOLDLINE_TTS_VOICE": "en-gb",
        "HOLDLINE_TTS_WPM": "150", "HOLDLINE_SPEECH_MODULES": " a.b , ,c ",
        "HOLDLINE_DTMF_PAUSE_MS": "900", "HOLDLINE_PLAYOUT_LEAD_MS": "0",
        "HOLDLINE_CALL_OWNER_TTL_S": "3.5", "HOLDLINE_FALSE_INTERRUPTION_MS": "0",
        "HOLDLINE_BACKCHANNEL_CONTINUE": "0", "TWILIO_AUTH_TOKEN": "t0k",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    s = VoiceSettings.from_env()
    assert (s.tts, s.stt, s.tts_voice, s.tts_wpm) == ("deepgram", "none", "en-gb", 150)
    assert (s.dtmf_pause_ms, s.playout_lead_ms, s.call_owner_ttl_s) == (900, 0, 3.5)
    assert s.speech_modules == ("a.b", "c")
    assert s.vad.false_interruption_ms == 0
    assert not s.floor.continue_on_backchannel
    assert s.trust.auth_token == "t0k"
