"""Telnyx's Ed25519 webhook signatures, checked against the official `telnyx` SDK.

Every vector is signed here with a fresh Ed25519 key, and holdline's verdict must be the
SDK's own (`telnyx.lib.webhook_verification.verify_webhook_signature`) on the same request:
what Telnyx signs passes both, anything forged, altered, stale or malformed fails both.
"""

from __future__ import annotations

import base64
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from telnyx.lib.webhook_verification import WebhookVerificationError, verify_webhook_signature

from services.interaction_surface.voice.telnyx_trust import (
    TelnyxTrust,
    signature_ok,
    telnyx_trust_from_env,
)
from services.interaction_surface.voice.trust import TelephonyMisconfigured

KEY = Ed25519PrivateKey.generate()
PUBLIC = base64.b64encode(KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
OTHER = Ed25519PrivateKey.generate()
BODY = b"CallSid=v3%3Aabc&From=%2B15550100&To=%2B15550199"


def sign(body: bytes, timestamp: str, key: Ed25519PrivateKey = KEY) -> dict[str, str]:
    signature = key.sign(timestamp.encode() + b"|" + body)
    return {"Telnyx-Signature-Ed25519": base64.b64encode(signature).decode(),
            "Telnyx-Timestamp": timestamp}


def sdk_accepts(body: bytes, headers: dict[str, str], public_key: str = PUBLIC) -> bool:
    try:
        verify_webhook_signature(body, headers, public_key)
    except WebhookVerificationError:
        return False
    return True


def cases(now: int) -> dict[str, tuple[bytes, dict[str, str], bool]]:
    """Each request and whether Telnyx signed it, at `now` (built when the test runs: the
    tolerance is measured against the clock)."""
    at = str(now)
    signed = sign(BODY, at)
    return {
        "signed by Telnyx": (BODY, signed, True),
        "headers in any case": (BODY, {k.upper(): v for k, v in signed.items()}, True),
        "4 minutes old": (BODY, sign(BODY, str(now - 240)), True),
        "6 minutes old": (BODY, sign(BODY, str(now - 360)), False),
        "6 minutes ahead": (BODY, sign(BODY, str(now + 360)), False),
        "another key": (BODY, sign(BODY, at, OTHER), False),
        "body altered": (BODY + b"&x=1", signed, False),
        "timestamp altered": (BODY, {**signed, "Telnyx-Timestamp": str(now - 1)}, False),
        "no signature": (BODY, {"Telnyx-Timestamp": at}, False),
        "no timestamp": (BODY, {"Telnyx-Signature-Ed25519": signed[
            "Telnyx-Signature-Ed25519"]}, False),
        "timestamp not a number": (BODY, {**signed, "Telnyx-Timestamp": "soon"}, False),
        "signature not base64": (BODY, {**signed, "Telnyx-Signature-Ed25519": "%%%"}, False),
        "signature too short": (BODY, {**signed, "Telnyx-Signature-Ed25519":
                                       base64.b64encode(b"x" * 32).decode()}, False),
    }


@pytest.mark.parametrize("name", sorted(cases(0)))
def test_our_verdict_is_the_sdk_verdict(name: str) -> None:
    body, headers, expected = cases(int(time.time()))[name]
    assert sdk_accepts(body, headers) is expected
    assert signature_ok(PUBLIC, body, headers, now=time.time()) is expected
    trust = TelnyxTrust(public_key=PUBLIC, ticket_secret="s" * 32)
    assert trust.verify(body, headers, now=time.time()) is expected


def test_a_wrong_public_key_accepts_nothing() -> None:
    body, headers, _ = cases(int(time.time()))["signed by Telnyx"]
    other = base64.b64encode(OTHER.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw))
    assert not sdk_accepts(body, headers, other.decode())
    assert not signature_ok(other.decode(), body, headers, now=time.time())
    assert not signature_ok("bm90IGEga2V5", body, headers, now=time.time())
    # Unsigned (no key): nothing verifies, and the edge serves local requests only.
    assert not TelnyxTrust().verify(body, headers, now=time.time())
    assert TelnyxTrust().problems()


def test_settings_refuse_a_bad_key_or_a_missing_ticket_secret(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TELNYX_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("HOLDLINE_TELNYX_TICKET_SECRET", "a-long-enough-secret")
    trust = telnyx_trust_from_env()
    assert trust.signed
    other = TelnyxTrust(public_key=PUBLIC, ticket_secret="other-secret!!!!")
    assert trust.ticket_key != other.ticket_key
    monkeypatch.setenv("HOLDLINE_TELNYX_TICKET_SECRET", "")
    with pytest.raises(TelephonyMisconfigured, match="HOLDLINE_TELNYX_TICKET_SECRET"):
        telnyx_trust_from_env()
    monkeypatch.setenv("TELNYX_PUBLIC_KEY", "c2hvcnQ=")
    with pytest.raises(TelephonyMisconfigured, match="Ed25519"):
        telnyx_trust_from_env()
