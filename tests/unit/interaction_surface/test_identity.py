"""Who a new session is for (identity.py) and when the surface refuses to start open."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from services.interaction_surface.identity import (
    Identity,
    IdentityRefused,
    JwtVerifier,
    identify,
)
from services.interaction_surface.settings import (
    JwtSettings,
    Misconfigured,
    Settings,
    is_loopback_host,
    startup_refusal,
)

KEYS = {"acme": "acme-key", "globex": "globex-key"}
SECRET = "s" * 40
HS = JwtSettings(key=SECRET, algorithms=("HS256",), issuer="https://idp", audience="holdline")


def _token(claims: dict[str, Any], secret: str = SECRET, **headers: Any) -> str:
    base = {"iss": "https://idp", "aud": "holdline", "exp": int(time.time()) + 60}
    return jwt.encode({**base, **claims}, secret, algorithm="HS256", headers=headers or None)


def _identify(**kw: Any) -> Identity:
    args: dict[str, Any] = {
        "local": False, "api_keys": {}, "verifier": None, "api_key": None,
        "bearer_token": None, "user_id": "ana", "tenant_id": None, "default_tenant": "default",
    }
    return identify(**{**args, **kw})


def _refused(status: int, **kw: Any) -> None:
    with pytest.raises(IdentityRefused) as caught:
        _identify(**kw)
    assert caught.value.status == status


# ------------------------------------------------------------------ local and open


def test_a_local_request_without_credentials_works_as_before() -> None:
    assert _identify(local=True, tenant_id="acme") == Identity("ana", "acme")
    assert _identify(local=True) == Identity("ana", "default")


def test_off_loopback_without_a_credential_is_refused() -> None:
    # Before: any body was believed from anywhere.
    _refused(401, tenant_id="acme")


def test_with_keys_even_a_local_request_needs_one() -> None:
    _refused(401, local=True, api_keys=KEYS, tenant_id="acme")


# ------------------------------------------------------------------ API keys


def test_the_key_decides_the_tenant() -> None:
    assert _identify(api_keys=KEYS, api_key="acme-key") == Identity("ana", "acme")
    assert _identify(api_keys=KEYS, api_key="acme-key", tenant_id="acme").tenant_id == "acme"


def test_a_key_for_another_tenant_is_forbidden() -> None:
    _refused(403, api_keys=KEYS, api_key="globex-key", tenant_id="acme")


def test_an_unknown_key_is_unauthorised() -> None:
    _refused(401, api_keys=KEYS, api_key="nope", tenant_id="acme")
    _refused(401, local=True, api_keys=KEYS, api_key="nope")


# ------------------------------------------------------------------ JWTs


def test_a_signed_token_names_user_and_tenant() -> None:
    verifier = JwtVerifier(HS)
    token = _token({"sub": "ana", "tenant": "acme"})
    assert _identify(verifier=verifier, bearer_token=token) == Identity("ana", "acme")
    assert _identify(verifier=verifier, bearer_token=token, tenant_id="acme").tenant_id == "acme"


@pytest.mark.parametrize(
    "token",
    [
        _token({"sub": "ana", "tenant": "acme"}, secret="f" * 40),  # forged
        _token({"sub": "ana", "tenant": "acme", "exp": int(time.time()) - 120}),  # expired
        _token({"sub": "ana", "tenant": "acme", "aud": "someone-else"}),
        _token({"sub": "ana", "tenant": "acme", "iss": "https://evil"}),
        _token({"sub": "ana"}),  # no tenant claim
        jwt.encode({"sub": "ana", "tenant": "acme"}, SECRET, algorithm="HS256"),  # no exp
        "not-a-jwt",
    ],
    ids=["forged", "expired", "audience", "issuer", "no-tenant", "no-exp", "garbage"],
)
def test_a_bad_token_is_unauthorised(token: str) -> None:
    _refused(401, verifier=JwtVerifier(HS), bearer_token=token, local=True)


def test_an_unsigned_token_is_refused() -> None:
    body = jwt.utils.base64url_encode(
        json.dumps({"sub": "ana", "tenant": "acme", "exp": int(time.time()) + 60}).encode()
    ).decode()
    head = jwt.utils.base64url_encode(b'{"alg":"none","typ":"JWT"}').decode()
    _refused(401, verifier=JwtVerifier(HS), bearer_token=f"{head}.{body}.")


def test_a_body_naming_someone_else_is_forbidden() -> None:
    verifier = JwtVerifier(HS)
    token = _token({"sub": "ana", "tenant": "acme"})
    _refused(403, verifier=verifier, bearer_token=token, user_id="bob")
    _refused(403, verifier=verifier, bearer_token=token, tenant_id="globex")


def test_rs256_through_an_inline_jwks_and_a_pem_key(tmp_path: Any) -> None:
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(private.public_key()))
    document = json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig", "alg": "RS256"}]})
    claims = {"sub": "ana", "org": "acme", "exp": int(time.time()) + 60}
    token = jwt.encode(claims, private, algorithm="RS256", headers={"kid": "k1"})
    path = tmp_path / "jwks.json"
    path.write_text(document)
    for settings in (
        JwtSettings(jwks=document, tenant_claim="org"),
        JwtSettings(jwks=str(path), tenant_claim="org"),
        JwtSettings(key=pem, tenant_claim="org"),
    ):
        verifier = JwtVerifier(settings)
        assert _identify(verifier=verifier, bearer_token=token) == Identity("ana", "acme")
    # HS256 signed with the public key as secret (algorithm confusion) is refused.
    head = jwt.utils.base64url_encode(b'{"alg":"HS256","typ":"JWT"}').decode()
    body = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    mac = hmac.new(pem.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    forged = f"{head}.{body}.{jwt.utils.base64url_encode(mac).decode()}"
    with pytest.raises(IdentityRefused):
        JwtVerifier(JwtSettings(key=pem, algorithms=("RS256", "HS256"))).identity(forged)


def test_an_unusable_jwks_stops_the_start() -> None:
    with pytest.raises(Misconfigured):
        JwtVerifier(JwtSettings(jwks="/nonexistent/jwks.json"))


def test_a_bearer_token_is_ignored_when_jwts_are_not_configured() -> None:
    token = _token({"sub": "mallory", "tenant": "acme"})
    _refused(401, bearer_token=token)
    assert _identify(local=True, bearer_token=token) == Identity("ana", "default")


# ------------------------------------------------------------------ refusing to start open


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2", "[::1]"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback_host(host)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.4", "example.com"])
def test_public_hosts(host: str) -> None:
    assert not is_loopback_host(host)


def test_a_surface_off_loopback_without_credentials_refuses_to_start() -> None:
    risk = startup_refusal("0.0.0.0", api_keys=False, jwt_configured=False, insecure_open=False)
    assert risk is not None
    assert risk.fatal
    assert "HOLDLINE_TENANT_API_KEYS" in risk.message
    assert "HOLDLINE_JWT_KEY" in risk.message
    assert "HOLDLINE_INSECURE_OPEN" in risk.message


def test_insecure_open_starts_with_a_warning() -> None:
    risk = startup_refusal("0.0.0.0", api_keys=False, jwt_configured=False, insecure_open=True)
    assert risk is not None
    assert not risk.fatal


@pytest.mark.parametrize(
    ("host", "keys", "jwts"),
    [("127.0.0.1", False, False), ("0.0.0.0", True, False), ("0.0.0.0", False, True)],
)
def test_a_surface_may_start(host: str, keys: bool, jwts: bool) -> None:
    assert startup_refusal(host, api_keys=keys, jwt_configured=jwts, insecure_open=False) is None


def test_settings_load_refuses_an_open_public_surface(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("INTERACTION_SURFACE_HOST", "0.0.0.0")
    for name in ("HOLDLINE_TENANT_API_KEYS", "HOLDLINE_JWT_KEY", "HOLDLINE_JWT_JWKS",
                 "HOLDLINE_INSECURE_OPEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(Misconfigured, match=r"INTERACTION_SURFACE_HOST=0\.0\.0\.0"):
        Settings.from_env()
    monkeypatch.setenv("HOLDLINE_INSECURE_OPEN", "1")
    assert Settings.from_env().insecure_open
    assert "ANYONE" in caplog.text
    monkeypatch.delenv("HOLDLINE_INSECURE_OPEN")
    monkeypatch.setenv("HOLDLINE_TENANT_API_KEYS", "acme:k")
    assert Settings.from_env().tenant_api_keys == {"acme": "k"}
