"""Who an HTTP tool's request is for: the tenant and the user as headers, signed.

Every request of a file-declared HTTP tool carries `X-Holdline-Tenant` and
`X-Holdline-User` (the session's, as admission checked them: never the model's words),
`X-Holdline-Timestamp` (Unix seconds) and, when the tool declares
`identity_secret_env`, `X-Holdline-Signature: sha256=<hex>`, the HMAC-SHA256 under that
secret of `<timestamp>.<tenant>.<user>`. The API checks it with `verify` (or the same three
lines in its own language) and takes the user from the headers, not from the body.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

TENANT = "X-Holdline-Tenant"
USER = "X-Holdline-User"
TIMESTAMP = "X-Holdline-Timestamp"
SIGNATURE = "X-Holdline-Signature"
# How far a signed timestamp may be from the verifier's clock.
TOLERANCE_S = 300.0


def _mac(secret: bytes, stamp: str, tenant: str, user: str) -> str:
    material = f"{stamp}.{tenant}.{user}".encode()
    return hmac.new(secret, material, hashlib.sha256).hexdigest()


def identity_headers(
    tenant_id: str, user_id: str, *, secret: bytes | None, now: float
) -> dict[str, str]:
    """The headers naming the tenant and the user (signed when there is a secret)."""
    stamp = str(int(now))
    headers = {TENANT: tenant_id, USER: user_id, TIMESTAMP: stamp}
    if secret:
        headers[SIGNATURE] = "sha256=" + _mac(secret, stamp, tenant_id, user_id)
    return headers


def verify(headers: Mapping[str, str], *, secret: bytes, now: float) -> tuple[str, str] | None:
    """(tenant, user) when the headers are signed with `secret` within the tolerance."""
    lowered = {k.lower(): v for k, v in headers.items()}
    tenant = lowered.get(TENANT.lower(), "")
    user = lowered.get(USER.lower(), "")
    stamp = lowered.get(TIMESTAMP.lower(), "")
    given = lowered.get(SIGNATURE.lower(), "").removeprefix("sha256=")
    if not (tenant and user and stamp.isdigit() and given):
        return None
    if abs(now - int(stamp)) > TOLERANCE_S:
        return None
    if not hmac.compare_digest(given, _mac(secret, stamp, tenant, user)):
        return None
    return tenant, user
