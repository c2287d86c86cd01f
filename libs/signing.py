"""HMAC-SHA256 signatures for provider callbacks.

The signed message is ``"<timestamp>.<raw body>"`` so a captured body cannot be replayed
under a fresh timestamp. Headers on the wire::

    X-Holdline-Timestamp: <unix seconds>
    X-Holdline-Signature: sha256=<lowercase hex>

A signature header may carry several comma-separated values (secret rotation); any match
is accepted. Both functions are pure: the caller passes the clock.
"""

from __future__ import annotations

import hashlib
import hmac
import math

TIMESTAMP_HEADER = "X-Holdline-Timestamp"
SIGNATURE_HEADER = "X-Holdline-Signature"
_SCHEME = "sha256="


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """Return ``"sha256=<hex>"`` over ``"<timestamp>.<body>"``."""
    message = str(int(timestamp)).encode("ascii") + b"." + body
    return _SCHEME + hmac.new(secret, message, hashlib.sha256).hexdigest()


def verify(
    secret: bytes,
    timestamp_header: str | None,
    signature_header: str | None,
    body: bytes,
    *,
    now: float,
    tolerance_s: float = 300,
) -> bool:
    """True when the signature matches and the timestamp is within ``tolerance_s`` of ``now``."""
    if not timestamp_header or not signature_header:
        return False
    stamp = timestamp_header.strip()
    # Strict digits only: int() would also accept "+12", " 12", "1_2".
    if not stamp.isascii() or not stamp.isdigit():
        return False
    timestamp = int(stamp)
    if not math.isfinite(now) or abs(now - timestamp) > tolerance_s:
        return False
    expected = sign(secret, timestamp, body).encode("ascii")
    matched = False
    for candidate in signature_header.split(","):
        # No early exit: every candidate is compared so timing does not reveal which matched.
        matched |= hmac.compare_digest(expected, candidate.strip().encode("utf-8"))
    return matched
