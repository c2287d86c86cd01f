"""`VoiceSettings`: every environment variable of the voice channel, read once at start-up.

The parts keep their own typed configs (`TrustSettings`, `VadConfig`, `FloorConfig`,
`DeepgramConfig` when that engine is chosen), each still read by its own `from_env`;
this is the one place that calls them, with the channel's own knobs beside them. Names and
defaults are unchanged:

- engines: `HOLDLINE_TTS` (espeak), `HOLDLINE_STT` (pocketsphinx; `none`),
  `HOLDLINE_TTS_VOICE` (en-us), `HOLDLINE_TTS_WPM` (175), `HOLDLINE_SPEECH_MODULES` ('');
  the Deepgram ones are listed by `DeepgramConfig.from_env`;
- the call: `HOLDLINE_DTMF_PAUSE_MS` (2000), `HOLDLINE_PLAYOUT_LEAD_MS` (160),
  `HOLDLINE_CALL_OWNER_TTL_S` (10);
- `VadConfig.from_env` (`HOLDLINE_VAD_*`, `HOLDLINE_FALSE_INTERRUPTION_MS`),
  `FloorConfig.from_env` (`HOLDLINE_BACKCHANNEL*`, `HOLDLINE_STT_CONFIRM_*`),
  `TrustSettings.from_env` (`TWILIO_*`, `HOLDLINE_PUBLIC_URL`, `HOLDLINE_TRUSTED_PROXIES`,
  `HOLDLINE_CALL_TICKET_TTL_S`, `HOLDLINE_REQUIRE_TWILIO_AUTH`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from libs.config import env_float, env_int, env_str

from .floor import FloorConfig
from .trust import TrustSettings
from .vad import VadConfig


@dataclass(frozen=True)
class VoiceSettings:
    """The voice channel's settings; `from_env` is called once per surface process."""

    trust: TrustSettings = field(default_factory=TrustSettings)
    vad: VadConfig = field(default_factory=VadConfig)
    floor: FloorConfig = field(default_factory=FloorConfig)
    tts: str = "espeak"
    stt: str = "pocketsphinx"
    tts_voice: str = "en-us"
    tts_wpm: int = 175
    speech_modules: tuple[str, ...] = ()
    dtmf_pause_ms: int = 2000
    playout_lead_ms: int = 160
    call_owner_ttl_s: float = 10.0

    @classmethod
    def from_env(cls) -> VoiceSettings:
        """Read the environment (TelephonyMisconfigured when the phone edge is unusable)."""
        modules = env_str("HOLDLINE_SPEECH_MODULES", "").split(",")
        return cls(
            trust=TrustSettings.from_env(),
            vad=VadConfig.from_env(),
            floor=FloorConfig.from_env(),
            tts=env_str("HOLDLINE_TTS", "espeak"),
            stt=env_str("HOLDLINE_STT", "pocketsphinx"),
            tts_voice=env_str("HOLDLINE_TTS_VOICE", "en-us"),
            tts_wpm=env_int("HOLDLINE_TTS_WPM", 175),
            speech_modules=tuple(m.strip() for m in modules if m.strip()),
            dtmf_pause_ms=env_int("HOLDLINE_DTMF_PAUSE_MS", 2000),
            playout_lead_ms=env_int("HOLDLINE_PLAYOUT_LEAD_MS", 160),
            call_owner_ttl_s=env_float("HOLDLINE_CALL_OWNER_TTL_S", 10.0),
        )
