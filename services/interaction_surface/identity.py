"""Who opens a session: a tenant credential, or a local process.

One rule for every route that opens a session from a request (`POST /v1/sessions`):

- `X-Api-Key` (server to server, `HOLDLINE_TENANT_API_KEYS`): the key decides the tenant;
  a body naming another tenant is refused (403).
- `Authorization: Bearer <JWT>` signed for the tenant (`HOLDLINE_JWT_*`): `sub` is the user,
  the tenant claim the tenant; a bad token is 401, a body naming another user or tenant 403.
- neither: only a local request (a loopback peer and no forwarding header, the rule of
  `voice/trust.is_local`) is served, as before credentials existed, and it still needs the
  tenant's key when keys are configured.

The other half is `settings.startup_refusal`: a surface listening off loopback with no
credential configured would serve anyone, so it refuses to start.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

from .settings import JwtSettings, Misconfigured
from .voice.trust import is_local

__all__ = [
    "Identity",
    "IdentityRefused",
    "JwtSettings",
    "JwtVerifier",
    "identify",
    "is_local",
]


@dataclass(frozen=True, slots=True)
class Identity:
    """The user and tenant a new session belongs to."""

    user_id: str
    tenant_id: str


class IdentityRefused(Exception):
    """No session: `status` (401 no valid credential, 403 a credential for someone else)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class JwtVerifier:
    """Checks a tenant-signed token against `JwtSettings` (keys read once, at start)."""

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        self._key: Any = None
        self._jwks: jwt.PyJWKSet | None = None
        if settings.jwks:
            raw = settings.jwks.strip()
            try:
                text = raw if raw.startswith("{") else Path(raw).read_text(encoding="utf-8")
                self._jwks = jwt.PyJWKSet.from_dict(json.loads(text))
            except (OSError, ValueError, jwt.PyJWTError) as exc:
                raise Misconfigured(f"HOLDLINE_JWT_JWKS is not a usable JWKS: {exc}") from None
        elif settings.key:
            self._key = settings.key.encode()

    @property
    def configured(self) -> bool:
        """Whether JWTs are accepted at all."""
        return self.settings.configured

    def _signing_key(self, token: str) -> Any:
        if self._jwks is None:
            return self._key
        kid = jwt.get_unverified_header(token).get("kid")
        keys = [k for k in self._jwks.keys if kid is None or k.key_id == kid]
        if len(keys) != 1:
            raise jwt.InvalidKeyError("no single JWKS key matches the token's kid")
        return keys[0].key

    def identity(self, token: str) -> Identity:
        """The token's user and tenant; IdentityRefused(401) for any bad token."""
        s = self.settings
        try:
            claims = jwt.decode(
                token,
                self._signing_key(token),
                algorithms=list(s.algorithms),
                audience=s.audience or None,
                issuer=s.issuer or None,
                options={
                    "require": ["exp", "sub"],
                    "verify_aud": bool(s.audience),
                    "verify_iss": bool(s.issuer),
                },
            )
        except (jwt.PyJWTError, ValueError, TypeError) as exc:
            raise IdentityRefused(401, f"the bearer token was refused: {exc}") from None
        user, tenant = claims.get("sub"), claims.get(s.tenant_claim)
        if not isinstance(user, str) or not isinstance(tenant, str) or not user or not tenant:
            raise IdentityRefused(
                401, f"the bearer token must carry sub and {s.tenant_claim} as strings"
            )
        return Identity(user_id=user, tenant_id=tenant)


def _tenant_of_key(keys: dict[str, str], presented: str) -> str | None:
    found = None
    # Every key is compared (constant time each), so timing does not say which one matched.
    for tenant, key in keys.items():
        if hmac.compare_digest(key.encode(), presented.encode()):
            found = tenant
    return found


def identify(
    *,
    local: bool,
    api_keys: dict[str, str],
    verifier: JwtVerifier | None,
    api_key: str | None,
    bearer_token: str | None,
    user_id: str,
    tenant_id: str | None,
    default_tenant: str,
) -> Identity:
    """Who a new session is for, from the request's credential; IdentityRefused otherwise."""
    if api_key and api_keys:
        tenant = _tenant_of_key(api_keys, api_key)
        if tenant is None:
            raise IdentityRefused(401, "the X-Api-Key is not a tenant's key")
        if tenant_id is not None and tenant_id != tenant:
            raise IdentityRefused(403, "the X-Api-Key belongs to another tenant")
        return Identity(user_id=user_id, tenant_id=tenant)
    if bearer_token and verifier is not None and verifier.configured:
        claimed = verifier.identity(bearer_token)
        if user_id != claimed.user_id:
            raise IdentityRefused(403, "user_id is not the token's sub")
        if tenant_id is not None and tenant_id != claimed.tenant_id:
            raise IdentityRefused(403, "tenant_id is not the token's tenant")
        return claimed
    if not local:
        raise IdentityRefused(
            401, "a tenant credential is required: X-Api-Key or a tenant-signed bearer JWT"
        )
    tenant = tenant_id or default_tenant
    if api_keys:
        # Keys configured: even a local caller names its tenant by key (as before).
        raise IdentityRefused(401, "a valid X-Api-Key for the tenant is required")
    return Identity(user_id=user_id, tenant_id=tenant)
