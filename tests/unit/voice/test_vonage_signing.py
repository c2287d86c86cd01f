"""Vonage's signed webhooks: holdline's check against the official SDK's on the same vectors,
then the payload hash and the token's age, which the SDK leaves to the application."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import jwt
import pytest
from vonage_jwt.errors import VonageVerifyJwtError
from vonage_jwt.verify_jwt import verify_signature
from vonage_voice import Voice

from services.interaction_surface.voice.vonage_signing import (
    VonageRefused,
    signed_payload,
    verify_request,
)

pytestmark = pytest.mark.fast

SECRET = "vonage-signature-secret-for-tests-" + "0123456789" * 4
NOW = time.time()
BODY = json.dumps({"from": "447700900000", "to": "447700900001", "uuid": "aaaa-bbbb",
                   "conversation_uuid": "CON-1"}).encode()


def token(secret: str = SECRET, algorithm: str = "HS256", **claims: Any) -> str:
    """A token as Vonage signs one (its claims: iat, jti, iss, payload_hash, ids)."""
    base: dict[str, Any] = {
        "iat": int(NOW), "jti": "c5ba8f24-1a14-4c10-bfdf-3fbe8ce511b5", "iss": "Vonage",
        "payload_hash": hashlib.sha256(BODY).hexdigest(), "api_key": "abcd1234",
        "application_id": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab",
    }
    base.update(claims)
    return jwt.encode({k: v for k, v in base.items() if v is not None}, secret,
                      algorithm=algorithm)


def sdk_accepts(value: str) -> bool:
    """The official SDK's verdict: True, or False / VonageVerifyJwtError."""
    try:
        return verify_signature(value, SECRET)
    except VonageVerifyJwtError:
        return False


def ours_accepts(value: str) -> bool:
    try:
        verify_request(SECRET, f"Bearer {value}", BODY, now=NOW, max_age_s=300)
    except VonageRefused:
        return False
    return True


def _tampered() -> str:
    head, _claims, signature = token().split(".")
    other = jwt.utils.base64url_encode(json.dumps({"iat": int(NOW), "iss": "x"}).encode())
    return ".".join((head, other.decode(), signature))


VECTORS = {
    "signed by Vonage": token(),
    "another secret": token(secret="not-the-secret-" + "9876543210" * 6),
    "HS512": token(algorithm="HS512"),
    "claims changed after signing": _tampered(),
    "expired": token(exp=int(NOW) - 10),
    "not a token": "not.a.token",
    "unsigned (alg none)": jwt.encode({"iat": int(NOW)}, None, algorithm="none"),
}


@pytest.mark.parametrize("name", list(VECTORS))
def test_signature_verdicts_match_the_official_sdk(name: str) -> None:
    value = VECTORS[name]
    assert ours_accepts(value) == sdk_accepts(value), name
    # The SDK's Voice client says the same (it calls the same function).
    if sdk_accepts(value):
        assert Voice.verify_signature.__wrapped__(None, value, SECRET)  # type: ignore[attr-defined]


def test_the_honest_vector_is_accepted() -> None:
    assert ours_accepts(VECTORS["signed by Vonage"])


@pytest.mark.parametrize(
    ("claims", "payload", "reason"),
    [
        ({}, BODY.replace(b"447700900000", b"447700900666"), "payload_mismatch"),
        ({"payload_hash": None}, BODY, "payload_mismatch"),
        ({"iat": None}, BODY, "no_iat"),
        ({"iat": int(NOW) - 3600}, BODY, "stale_token"),
    ],
)
def test_payload_and_age_beyond_the_sdk(
    claims: dict[str, Any], payload: bytes, reason: str
) -> None:
    value = token(**claims)
    assert sdk_accepts(value)  # a valid signature: the rest is the application's check
    with pytest.raises(VonageRefused) as refused:
        verify_request(SECRET, f"Bearer {value}", payload, now=NOW, max_age_s=300)
    assert refused.value.reason == reason


def test_a_missing_or_foreign_authorization_is_refused() -> None:
    for header in (None, "", "Basic abc", "Bearer "):
        with pytest.raises(VonageRefused) as refused:
            verify_request(SECRET, header, BODY, now=NOW, max_age_s=300)
        assert refused.value.reason == "no_token"


def test_a_get_signs_its_query_as_compact_json() -> None:
    query = [("to", "447700900001"), ("from", "447700900000"), ("uuid", "u-1")]
    assert signed_payload("GET", query, b"") == (
        b'{"to":"447700900001","from":"447700900000","uuid":"u-1"}'
    )
    assert signed_payload("POST", query, BODY) == BODY
