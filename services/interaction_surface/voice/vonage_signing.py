"""Vonage's signed webhooks: whether a request to the answer webhook came from Vonage.

With signed webhooks on, Vonage sends `Authorization: Bearer <JWT>`, a JWT signed HS256 with
the account's signature secret, whose claims carry `iat` and `payload_hash` (the SHA-256 hex
of what was sent). It is checked in the two steps Vonage documents:

1. the token, exactly as the official SDK checks it (`vonage_jwt.verify_signature`:
   `jwt.decode(token, secret, algorithms="HS256")`, so a bad signature, another algorithm,
   a malformed token or an expired `exp` all fail);
2. the payload: `payload_hash` must be the SHA-256 of the request's payload, which for a
   POST is the JSON body as sent and for a GET the query parameters as one JSON object, in
   their order, without whitespace (as Vonage's support article states).

holdline also refuses a token without `iat` or issued more than the ticket lifetime ago (a
captured request replayed later gets no new call ticket).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence

import jwt

# How far in the future an `iat` may be (clocks differ a little).
CLOCK_SKEW_S = 60.0


class VonageRefused(Exception):
    """A webhook request Vonage did not sign; `reason` is the logged code."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def signed_payload(method: str, query: Sequence[tuple[str, str]], body: bytes) -> bytes:
    """What `payload_hash` covers: the body of a POST, the query of a GET as JSON."""
    if method.upper() != "GET":
        return body
    return json.dumps(dict(query), separators=(",", ":"), ensure_ascii=False).encode()


def payload_hash(payload: bytes) -> str:
    """The `payload_hash` claim Vonage puts in a token for this payload."""
    return hashlib.sha256(payload).hexdigest()


def bearer(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer` header; VonageRefused without one."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise VonageRefused("no_token")
    return token.strip()


def verify_request(
    secret: str, authorization: str | None, payload: bytes, *, now: float, max_age_s: float
) -> dict[str, object]:
    """The token's claims when Vonage signed this request; VonageRefused otherwise."""
    token = bearer(authorization)
    try:
        claims: dict[str, object] = jwt.decode(token, secret, algorithms=["HS256"])
    except jwt.InvalidTokenError:
        raise VonageRefused("bad_signature") from None
    claimed = claims.get("payload_hash")
    if not isinstance(claimed, str) or not hmac.compare_digest(
        claimed.lower(), payload_hash(payload)
    ):
        raise VonageRefused("payload_mismatch")
    issued = claims.get("iat")
    if not isinstance(issued, int | float) or isinstance(issued, bool):
        raise VonageRefused("no_iat")
    if issued > now + CLOCK_SKEW_S or now - issued > max_age_s:
        raise VonageRefused("stale_token")
    return claims
