"""Who Telnyx is: its Ed25519 webhook signatures, and the key of Telnyx call tickets.

Telnyx signs every webhook (TeXML's included) with Ed25519: `telnyx-signature-ed25519` is
the base64 signature of `"{telnyx-timestamp}|{raw body}"`, checked with the account's public
key (Mission Control, `TELNYX_PUBLIC_KEY`, base64 of 32 bytes), and a timestamp more than
300 s away from now is refused. `TelnyxTrust.verify` checks exactly what the official
`telnyx` SDK's `verify_webhook_signature` checks (the tests use the SDK as the reference).

The media stream's WebSocket is not signed, so the signed webhook issues a call ticket
(`trust.issue_ticket`) that the stream's `start` must carry, as for Twilio. The public key
is public, so tickets are keyed by a server secret of their own,
`HOLDLINE_TELNYX_TICKET_SECRET` (the same on every surface). Without `TELNYX_PUBLIC_KEY`
nothing is checked and only local requests may use the webhook or open a session.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from libs.config import env_str

from .trust import TelephonyMisconfigured

SIGNATURE_HEADER = "telnyx-signature-ed25519"
TIMESTAMP_HEADER = "telnyx-timestamp"
# How far a webhook's timestamp may be from now, either way (the SDK's tolerance).
TOLERANCE_S = 300
_TICKET_LABEL = b"holdline telnyx call ticket v1"


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def public_key_bytes(public_key: str) -> bytes | None:
    """The 32 bytes of a base64 Ed25519 public key, or None when it is not one."""
    try:
        raw = base64.b64decode(public_key)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


def signature_ok(
    public_key: str, payload: bytes | str, headers: Mapping[str, str], *, now: float
) -> bool:
    """Whether the headers carry Telnyx's Ed25519 signature of this body, made within
    `TOLERANCE_S` of `now` (epoch seconds)."""
    signature_b64 = _header(headers, SIGNATURE_HEADER)
    timestamp = _header(headers, TIMESTAMP_HEADER)
    if not signature_b64 or not timestamp:
        return False
    try:
        sent = int(timestamp)
    except ValueError:
        return False
    if abs(int(now) - sent) > TOLERANCE_S:
        return False
    key = public_key_bytes(public_key)
    if key is None:
        return False
    try:
        signature = base64.b64decode(signature_b64)
    except (binascii.Error, ValueError):
        return False
    if len(signature) != 64:
        return False
    try:
        body = payload.decode("utf-8") if isinstance(payload, bytes) else payload
    except UnicodeDecodeError:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(
            signature, f"{timestamp}|{body}".encode()
        )
    except InvalidSignature:
        return False
    return True


@dataclass(frozen=True)
class TelnyxTrust:
    """What the Telnyx edge trusts; see the module docstring."""

    # TELNYX_PUBLIC_KEY: the account's Ed25519 public key (base64), which checks Telnyx's
    # webhook signatures; unset, only local requests may use the Telnyx webhook or open a call.
    public_key: str = ""
    # HOLDLINE_TELNYX_TICKET_SECRET: the server secret Telnyx call tickets are keyed with
    # (any long random string, the same on every surface); needed with TELNYX_PUBLIC_KEY.
    ticket_secret: str = ""

    @property
    def signed(self) -> bool:
        """Whether Telnyx requests are checked (otherwise only local ones are served)."""
        return bool(self.public_key)

    @property
    def ticket_key(self) -> bytes:
        """The tickets' HMAC key, derived from the ticket secret."""
        return hmac.new(self.ticket_secret.encode(), _TICKET_LABEL, hashlib.sha256).digest()

    def verify(self, payload: bytes, headers: Mapping[str, str], *, now: float) -> bool:
        """Whether the request carries Telnyx's valid signature."""
        return self.signed and signature_ok(self.public_key, payload, headers, now=now)

    def problems(self) -> list[str]:
        """What is misconfigured, one sentence each (logged at start-up)."""
        if self.signed:
            return []
        return ["TELNYX_PUBLIC_KEY is not set: Telnyx requests cannot be authenticated, so "
                "only local requests may use the Telnyx webhook or open a Telnyx call"]


def telnyx_trust_from_env() -> TelnyxTrust:
    """`TELNYX_PUBLIC_KEY` and `HOLDLINE_TELNYX_TICKET_SECRET`; a key that is not an Ed25519
    public key, or one without the ticket secret, refuses the start."""
    trust = TelnyxTrust(
        public_key=env_str("TELNYX_PUBLIC_KEY", "").strip(),
        ticket_secret=env_str("HOLDLINE_TELNYX_TICKET_SECRET", ""),
    )
    if trust.public_key and public_key_bytes(trust.public_key) is None:
        raise TelephonyMisconfigured(
            "TELNYX_PUBLIC_KEY is not a base64 Ed25519 public key (32 bytes)"
        )
    if trust.public_key and len(trust.ticket_secret) < 16:
        raise TelephonyMisconfigured(
            "TELNYX_PUBLIC_KEY is set but HOLDLINE_TELNYX_TICKET_SECRET is not (16+ "
            "characters): the public key cannot key call tickets"
        )
    return trust
