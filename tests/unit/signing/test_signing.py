"""libs.signing: the callback HMAC scheme shared by the provider and the worker."""

from __future__ import annotations

import hashlib
import hmac

from libs.signing import sign, verify

SECRET = b"s3cret"
BODY = b'{"callback_id":"cb_1","status":"confirmed"}'
NOW = 1_700_000_000


def test_sign_is_hmac_sha256_over_timestamp_dot_body() -> None:
    expected = hmac.new(SECRET, f"{NOW}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign(SECRET, NOW, BODY) == f"sha256={expected}"


def test_verify_accepts_a_fresh_valid_signature() -> None:
    signature = sign(SECRET, NOW, BODY)
    assert verify(SECRET, str(NOW), signature, BODY, now=NOW + 10)
    assert verify(SECRET, str(NOW), f"sha256=00, {signature}", BODY, now=NOW)  # rotation


def test_verify_rejects_tampering_wrong_secret_and_stale_timestamps() -> None:
    signature = sign(SECRET, NOW, BODY)
    assert not verify(SECRET, str(NOW), signature, BODY + b" ", now=NOW)
    assert not verify(b"other", str(NOW), signature, BODY, now=NOW)
    assert not verify(SECRET, str(NOW + 1), signature, BODY, now=NOW)
    assert not verify(SECRET, str(NOW), signature, BODY, now=NOW + 301)
    assert not verify(SECRET, str(NOW), signature, BODY, now=NOW - 301)
    assert verify(SECRET, str(NOW), signature, BODY, now=NOW + 301, tolerance_s=400)


def test_verify_rejects_malformed_headers() -> None:
    signature = sign(SECRET, NOW, BODY)
    for timestamp in (None, "", "abc", "-5", "+1700000000", "1.5", "١٢٣"):
        assert not verify(SECRET, timestamp, signature, BODY, now=NOW)
    for bad in (None, "", "sha256=", signature.upper(), signature[len("sha256=") :], "sha256=ü"):
        assert not verify(SECRET, str(NOW), bad, BODY, now=NOW)
