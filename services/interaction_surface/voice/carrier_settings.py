"""The secrets of the carriers beyond Twilio (`CarrierSettings`), read once at start-up.

Telnyx's and Plivo's are their own modules' (`telnyx_trust`, `plivo_trust`: each checks its
carrier's signature); Vonage's and Exotel's are here.

Each carrier signs (or authenticates) its requests its own way, and each one's secret also
keys the call tickets its webhook issues, so a ticket one carrier's webhook issued opens
nothing on another carrier's stream. Without its secret a carrier's webhook and stream serve
only local requests (a loopback peer, no forwarding header), as Twilio's do without
`TWILIO_AUTH_TOKEN`.

- Vonage: `VONAGE_SIGNATURE_SECRET` checks the signed answer webhook (a JWT, HS256, as the
  `vonage` SDK verifies it, plus its `payload_hash`); `HOLDLINE_VONAGE_AUDIO_RATE` picks the
  L16 rate of the stream (16000 or 8000).
- Exotel: `EXOTEL_STREAM_USER` and `EXOTEL_STREAM_PASSWORD`, the HTTP Basic credentials put
  in the Voicebot applet's URLs (`https://user:password@host/...`), checked on the applet's
  URL request and on the stream's upgrade.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field

from libs.config import env_int, env_str

from .plivo_trust import PlivoTrust, plivo_trust_from_env
from .telnyx_trust import TelnyxTrust, telnyx_trust_from_env
from .trust import TelephonyMisconfigured

_VONAGE_LABEL = b"holdline vonage call ticket v1"
_EXOTEL_LABEL = b"holdline exotel call ticket v1"
VONAGE_RATES = (8000, 16000)


@dataclass(frozen=True)
class CarrierTrust:
    """What one carrier's edge trusts: a secret (empty: local requests only) and the call
    tickets it keys (`call_start.TicketTrust`)."""

    secret: str = ""
    label: bytes = b""
    ticket_ttl_s: float = 300.0

    @property
    def signed(self) -> bool:
        """Whether this carrier's requests are checked (otherwise only local ones are served)."""
        return bool(self.secret)

    @property
    def ticket_key(self) -> bytes:
        """The tickets' HMAC key, derived from the carrier's secret and its own label."""
        return hmac.new(self.secret.encode(), self.label, hashlib.sha256).digest()


@dataclass(frozen=True)
class VonageSettings:
    """The Vonage Voice API edge."""

    # VONAGE_SIGNATURE_SECRET: the signature secret of the Vonage account (signed webhooks);
    # unset, only local requests may use the Vonage answer webhook or open a session.
    signature_secret: str = ""
    # The L16 sample rate the NCCO asks Vonage to stream at (16000 or 8000).
    audio_rate: int = 16000
    # How long a call ticket issued by the answer webhook stays valid, and how old a signed
    # webhook's token may be.
    ticket_ttl_s: float = 300.0

    @property
    def trust(self) -> CarrierTrust:
        """The tickets this carrier's webhook issues and its stream checks."""
        return CarrierTrust(self.signature_secret, _VONAGE_LABEL, self.ticket_ttl_s)

    @classmethod
    def from_env(cls, ticket_ttl_s: float = 300.0) -> VonageSettings:
        """Read the environment (TelephonyMisconfigured on an unusable rate)."""
        settings = cls(
            signature_secret=env_str("VONAGE_SIGNATURE_SECRET", ""),
            audio_rate=env_int("HOLDLINE_VONAGE_AUDIO_RATE", 16000),
            ticket_ttl_s=ticket_ttl_s,
        )
        if settings.audio_rate not in VONAGE_RATES:
            raise TelephonyMisconfigured("HOLDLINE_VONAGE_AUDIO_RATE must be 8000 or 16000")
        return settings


@dataclass(frozen=True)
class ExotelSettings:
    """The Exotel Voicebot edge."""

    # EXOTEL_STREAM_USER: the HTTP Basic user of the Voicebot applet's URLs; with
    # EXOTEL_STREAM_PASSWORD, checked on the applet's URL request and the stream's upgrade.
    # Unset, only local requests may use the Exotel routes or open a session.
    user: str = ""
    # EXOTEL_STREAM_PASSWORD: the HTTP Basic password that goes with EXOTEL_STREAM_USER.
    password: str = field(default="", repr=False)
    # How long a call ticket issued by the applet's URL request stays valid.
    ticket_ttl_s: float = 300.0

    @property
    def trust(self) -> CarrierTrust:
        """The tickets this carrier's webhook issues and its stream checks."""
        secret = f"{self.user}:{self.password}" if self.user and self.password else ""
        return CarrierTrust(secret, _EXOTEL_LABEL, self.ticket_ttl_s)

    @classmethod
    def from_env(cls, ticket_ttl_s: float = 300.0) -> ExotelSettings:
        """Read the environment (TelephonyMisconfigured when only half the pair is set)."""
        settings = cls(
            user=env_str("EXOTEL_STREAM_USER", ""),
            password=env_str("EXOTEL_STREAM_PASSWORD", ""),
            ticket_ttl_s=ticket_ttl_s,
        )
        if bool(settings.user) != bool(settings.password):
            raise TelephonyMisconfigured(
                "EXOTEL_STREAM_USER and EXOTEL_STREAM_PASSWORD must be set together"
            )
        if ":" in settings.user:
            raise TelephonyMisconfigured("EXOTEL_STREAM_USER cannot contain ':'")
        return settings


@dataclass(frozen=True)
class CarrierSettings:
    """Every carrier beyond Twilio (Twilio's are `TrustSettings`)."""

    telnyx: TelnyxTrust = field(default_factory=TelnyxTrust)
    plivo: PlivoTrust = field(default_factory=PlivoTrust)
    vonage: VonageSettings = field(default_factory=VonageSettings)
    exotel: ExotelSettings = field(default_factory=ExotelSettings)

    @classmethod
    def from_env(cls, ticket_ttl_s: float = 300.0) -> CarrierSettings:
        """Read the environment once, at start-up (the tickets' lifetime is Twilio's:
        `HOLDLINE_CALL_TICKET_TTL_S`)."""
        return cls(
            telnyx=telnyx_trust_from_env(),
            plivo=plivo_trust_from_env(),
            vonage=VonageSettings.from_env(ticket_ttl_s),
            exotel=ExotelSettings.from_env(ticket_ttl_s),
        )
