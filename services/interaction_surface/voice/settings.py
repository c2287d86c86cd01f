"""`VoiceSettings`: every environment variable of the voice channel, read once at start-up.

The parts keep their own typed configs (`TrustSettings`, `VadConfig`, `FloorConfig`,
`DeepgramConfig` when that engine is chosen), read here and handed to them. Names and
defaults are unchanged:

- engines: `HOLDLINE_TTS` (espeak), `HOLDLINE_STT` (pocketsphinx; `none`),
  `HOLDLINE_TTS_VOICE` (en-us), `HOLDLINE_TTS_WPM` (175), `HOLDLINE_SPEECH_MODULES` ('');
  the Deepgram ones are listed by `deepgram_from_env`;
- the call: `HOLDLINE_DTMF_PAUSE_MS` (2000), `HOLDLINE_PLAYOUT_LEAD_MS` (160),
  `HOLDLINE_CALL_OWNER_TTL_S` (10);
- `vad_from_env` (`HOLDLINE_VAD_*`, `HOLDLINE_FALSE_INTERRUPTION_MS`),
  `floor_from_env` (`HOLDLINE_BACKCHANNEL*`, `HOLDLINE_STT_CONFIRM_*`),
  `trust_from_env` (`TWILIO_*`, `HOLDLINE_PUBLIC_URL`, `HOLDLINE_TRUSTED_PROXIES`,
  `HOLDLINE_CALL_TICKET_TTL_S`, `HOLDLINE_REQUIRE_TWILIO_AUTH`);
- the other carriers: `CarrierSettings.from_env` (`TELNYX_PUBLIC_KEY`,
  `HOLDLINE_TELNYX_TICKET_SECRET`, `PLIVO_AUTH_TOKEN`, `VONAGE_*`, `HOLDLINE_VONAGE_AUDIO_RATE`,
  `EXOTEL_STREAM_*`).
- `webrtc_from_env` (`HOLDLINE_ICE_SERVERS`, `HOLDLINE_WEBRTC_MEDIA_TIMEOUT_S`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from libs.config import env_bool, env_float, env_int, env_str

from .carrier_settings import CarrierSettings
from .engines.base import SpeechError
from .engines.deepgram import DeepgramConfig
from .floor import DEFAULT_BACKCHANNELS, FloorConfig, normalise
from .trust import TelephonyMisconfigured, TrustSettings, parse_networks, parse_shared_keys
from .vad import VadConfig
from .webrtc_settings import WebRtcSettings, webrtc_from_env


def trust_from_env() -> TrustSettings:
    """`TWILIO_AUTH_TOKEN`, `TWILIO_WEBHOOK_SHARED_KEYS`, `HOLDLINE_PUBLIC_URL`,
    `HOLDLINE_TRUSTED_PROXIES`, `HOLDLINE_CALL_TICKET_TTL_S`; with
    `HOLDLINE_REQUIRE_TWILIO_AUTH=1` a missing auth token refuses the start."""
    settings = TrustSettings(
        auth_token=env_str("TWILIO_AUTH_TOKEN", ""),
        shared_keys=parse_shared_keys(env_str("TWILIO_WEBHOOK_SHARED_KEYS", "")),
        public_url=env_str("HOLDLINE_PUBLIC_URL", "").rstrip("/"),
        trusted_proxies=parse_networks(env_str("HOLDLINE_TRUSTED_PROXIES", "")),
        ticket_ttl_s=env_float("HOLDLINE_CALL_TICKET_TTL_S", 300.0),
    )
    # HOLDLINE_REQUIRE_TWILIO_AUTH: 1 refuses to start without TWILIO_AUTH_TOKEN (a surface
    # whose phone sessions anyone could open).
    if env_bool("HOLDLINE_REQUIRE_TWILIO_AUTH", default=False) and not settings.auth_token:
        raise TelephonyMisconfigured(
            "HOLDLINE_REQUIRE_TWILIO_AUTH=1 but TWILIO_AUTH_TOKEN is not set: refusing "
            "to start a surface whose phone sessions anyone could open"
        )
    if settings.ticket_ttl_s <= 0:
        raise TelephonyMisconfigured("HOLDLINE_CALL_TICKET_TTL_S must be positive")
    return settings


def vad_from_env() -> VadConfig:
    """The VAD's configuration (listed on `VadConfig`)."""
    return VadConfig(
        aggressiveness=env_int("HOLDLINE_VAD_AGGRESSIVENESS", 2),
        min_speech_ms=env_int("HOLDLINE_VAD_MIN_SPEECH_MS", 60),
        endpoint_silence_ms=env_int("HOLDLINE_VAD_ENDPOINT_MS", 500),
        min_rms=env_int("HOLDLINE_VAD_MIN_RMS", 200),
        false_interruption_ms=env_int("HOLDLINE_FALSE_INTERRUPTION_MS", 600),
        detector=env_str("HOLDLINE_VAD_DETECTOR", "silero"),
        speech_prob=env_float("HOLDLINE_VAD_SPEECH_PROB", 0.5),
        confirm_ms=env_int("HOLDLINE_VAD_CONFIRM_MS", 32),
        confirm_window_ms=env_int("HOLDLINE_VAD_CONFIRM_WINDOW_MS", 160),
        level_db=env_float("HOLDLINE_VAD_LEVEL_DB", 8.0),
        sibilant_high=env_float("HOLDLINE_VAD_SIBILANT_HIGH", 0.70),
        sibilant_flatness=env_float("HOLDLINE_VAD_SIBILANT_FLATNESS", 0.72),
        model_path=env_str("HOLDLINE_VAD_MODEL_PATH", ""),
    )


def deepgram_from_env() -> DeepgramConfig:
    """`DEEPGRAM_API_KEY` (required: no key is a configuration error, not a silent
    fallback), `HOLDLINE_DEEPGRAM_URL`, `HOLDLINE_DEEPGRAM_STT_MODEL` (nova-3),
    `HOLDLINE_DEEPGRAM_TTS_MODEL` (aura-2-thalia-en), `HOLDLINE_LANGUAGE` (en),
    `HOLDLINE_DEEPGRAM_ENDPOINTING_MS` (300), `HOLDLINE_DEEPGRAM_TIMEOUT_S` (5),
    `HOLDLINE_DEEPGRAM_RETRIES` (2), `HOLDLINE_DEEPGRAM_FINALIZE_S` (2)."""
    key = env_str("DEEPGRAM_API_KEY", "")
    if not key:
        raise SpeechError("DEEPGRAM_API_KEY is not set")
    return DeepgramConfig(
        api_key=key,
        base_url=env_str("HOLDLINE_DEEPGRAM_URL", "https://api.deepgram.com").rstrip("/"),
        stt_model=env_str("HOLDLINE_DEEPGRAM_STT_MODEL", "nova-3"),
        tts_model=env_str("HOLDLINE_DEEPGRAM_TTS_MODEL", "aura-2-thalia-en"),
        language=env_str("HOLDLINE_LANGUAGE", "en"),
        endpointing_ms=env_int("HOLDLINE_DEEPGRAM_ENDPOINTING_MS", 300),
        timeout_s=env_float("HOLDLINE_DEEPGRAM_TIMEOUT_S", 5.0),
        retries=env_int("HOLDLINE_DEEPGRAM_RETRIES", 2),
        finalize_s=env_float("HOLDLINE_DEEPGRAM_FINALIZE_S", 2.0),
    )


def floor_from_env() -> FloorConfig:
    """Backchannels and the confirmation of doubtful hearings (listed on `FloorConfig`)."""
    raw = env_str("HOLDLINE_BACKCHANNELS", ",".join(DEFAULT_BACKCHANNELS))
    return FloorConfig(
        backchannels=frozenset(normalise(p) for p in raw.split(",") if normalise(p)),
        continue_on_backchannel=env_int("HOLDLINE_BACKCHANNEL_CONTINUE", 1) != 0,
        confirm_below=env_float("HOLDLINE_STT_CONFIRM_BELOW", 0.6),
        confirm_unknown=env_int("HOLDLINE_STT_CONFIRM_UNKNOWN", 1) != 0,
    )


@dataclass(frozen=True)
class VoiceSettings:
    """The voice channel's settings; `from_env` is called once per surface process, by the
    surface's `Settings.from_env`."""

    trust: TrustSettings = field(default_factory=TrustSettings)
    vad: VadConfig = field(default_factory=VadConfig)
    floor: FloorConfig = field(default_factory=FloorConfig)
    webrtc: WebRtcSettings = field(default_factory=WebRtcSettings)
    # The speech synthesis engine (`espeak`, `deepgram`, or one a speech module registers).
    tts: str = "espeak"
    # The speech recognition engine (`pocketsphinx`, `deepgram`, `none`, or one a speech module
    # registers).
    stt: str = "pocketsphinx"
    # The espeak voice.
    tts_voice: str = "en-us"
    # The espeak speaking rate, in words per minute.
    tts_wpm: int = 175
    # `module,...`: imported first, so they can register extra engines.
    speech_modules: tuple[str, ...] = ()
    # Inter-digit pause that ends a DTMF entry without `#`.
    dtmf_pause_ms: int = 2000
    # Agent audio sent ahead of the playout model (0: the whole reply at once).
    playout_lead_ms: int = 160
    # A call's owner entry (which surface holds it) expires this long after its owner stops
    # refreshing it.
    call_owner_ttl_s: float = 10.0
    # Read only when `tts` or `stt` is `deepgram` and a key is set: without one, building
    # the engine at start-up fails, as it always did.
    deepgram: DeepgramConfig | None = None
    # The carriers beyond Twilio (Vonage, Exotel): `carrier_settings`.
    carriers: CarrierSettings = field(default_factory=CarrierSettings)

    def deepgram_config(self) -> DeepgramConfig:
        """The Deepgram engine's configuration (SpeechError without `DEEPGRAM_API_KEY`)."""
        if self.deepgram is None:
            raise SpeechError("DEEPGRAM_API_KEY is not set")
        return self.deepgram

    @classmethod
    def from_env(cls) -> VoiceSettings:
        """Read the environment (TelephonyMisconfigured when the phone edge is unusable)."""
        modules = env_str("HOLDLINE_SPEECH_MODULES", "").split(",")
        tts = env_str("HOLDLINE_TTS", "espeak")
        stt = env_str("HOLDLINE_STT", "pocketsphinx")
        chosen = "deepgram" in (tts, stt) and env_str("DEEPGRAM_API_KEY", "")
        deepgram = deepgram_from_env() if chosen else None
        trust = trust_from_env()
        return cls(
            trust=trust,
            vad=vad_from_env(),
            floor=floor_from_env(),
            webrtc=webrtc_from_env(),
            tts=tts,
            stt=stt,
            tts_voice=env_str("HOLDLINE_TTS_VOICE", "en-us"),
            tts_wpm=env_int("HOLDLINE_TTS_WPM", 175),
            speech_modules=tuple(m.strip() for m in modules if m.strip()),
            dtmf_pause_ms=env_int("HOLDLINE_DTMF_PAUSE_MS", 2000),
            playout_lead_ms=env_int("HOLDLINE_PLAYOUT_LEAD_MS", 160),
            call_owner_ttl_s=env_float("HOLDLINE_CALL_OWNER_TTL_S", 10.0),
            deepgram=deepgram,
            carriers=CarrierSettings.from_env(trust.ticket_ttl_s),
        )
