"""Session tokens (tenant credentials are identity.py's).

A session token is random and only its SHA-256 is stored (in `session.opened`); checking a
token hashes it and compares in constant time. Any mismatch answers like a missing session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from libs.clock import RANDOM_IDS
from libs.domain import SessionState


def new_token() -> str:
    """A bearer token with 256 bits of randomness."""
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    """What is stored instead of the token."""
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest()


def token_matches(state: SessionState | None, token: str | None) -> bool:
    """Whether the token was issued for this session (constant time once a session exists)."""
    if state is None or not token:
        return False
    return hmac.compare_digest(state.token_hash, hash_token(token))


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header."""
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def new_id(prefix: str) -> str:
    """A fresh id safe as a subject token."""
    return RANDOM_IDS.new(prefix)
