"""Who an MCP request is, the pure parts: the header session's id, a JWT bearer's user."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jwt
import pytest

from services.interaction_surface.identity import JwtVerifier
from services.interaction_surface.mcp.auth import McpAuth, Refused, header_session_id
from services.interaction_surface.settings import JwtSettings

SECRET = "a-test-secret-of-at-least-32-bytes!!"


@dataclass
class _Surface:
    jwt: JwtVerifier | None


def _auth(verifier: JwtVerifier | None) -> McpAuth:
    surface: Any = _Surface(jwt=verifier)
    return McpAuth(surface)


def test_a_header_session_is_the_same_for_the_same_user_and_tenant_only() -> None:
    assert header_session_id("acme", "ada") == header_session_id("acme", "ada")
    assert header_session_id("acme", "ada") != header_session_id("globex", "ada")
    assert header_session_id("acme", "ada") != header_session_id("acme", "bob")
    # No separator trick makes two identities one session.
    assert header_session_id("a", "cme\x00ada") != header_session_id("acme", "ada")


def test_a_jwt_bearer_names_its_user() -> None:
    verifier = JwtVerifier(JwtSettings(key=SECRET, algorithms=("HS256",)))
    token = jwt.encode(
        {"sub": "ada", "tenant": "acme", "exp": int(time.time()) + 60}, SECRET, "HS256"
    )
    assert _auth(verifier)._jwt_user(token) == "ada"


def test_a_bearer_that_is_neither_a_session_token_nor_a_jwt_is_refused() -> None:
    verifier = JwtVerifier(JwtSettings(key=SECRET, algorithms=("HS256",)))
    with pytest.raises(Refused) as refused:
        _auth(verifier)._jwt_user("not-a-token")
    assert refused.value.status == 401
    with pytest.raises(Refused) as unconfigured:
        _auth(None)._jwt_user("whatever")
    assert unconfigured.value.status == 401
