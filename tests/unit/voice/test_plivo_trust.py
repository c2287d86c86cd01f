"""Plivo's V3 webhook signatures, checked against the official `plivo` SDK.

Every signature here is computed from the SDK's own signed string (`construct_post_url`,
`construct_get_url`, `get_signature_v3`), and holdline's verdict must be the SDK's
`validate_v3_signature` on the same request.
"""

from __future__ import annotations

import pytest
from plivo.utils.signature_v3 import (
    construct_get_url,
    construct_post_url,
    get_signature_v3,
    validate_v3_signature,
)

from services.interaction_surface.voice.plivo_trust import (
    PlivoTrust,
    plivo_trust_from_env,
    v3_base_url,
    v3_signature,
)

TOKEN = "MTIzNDU2Nzg5MGFiY2RlZmdoaWprbG1u"
URL = "https://calls.example.com/v1/telephony/plivo/voice?tenant_id=acme&user_id=caller-1"
FORM = [("CallUUID", "c-uuid"), ("From", "+15550100"), ("To", "+15550199"),
        ("Digits", "2"), ("Digits", "1")]
REQUESTS: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("POST", URL, FORM),
    ("POST", URL.split("?", maxsplit=1)[0], FORM),
    ("POST", URL, []),
    ("POST", URL.split("?", maxsplit=1)[0], []),
    ("GET", URL, FORM[:3]),
    ("GET", URL.split("?", maxsplit=1)[0], []),
]


def sdk_params(pairs: list[tuple[str, str]]) -> dict[str, str | list[str]]:
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    return {k: v if len(v) > 1 else v[0] for k, v in grouped.items()}


def sdk_signature(method: str, url: str, pairs: list[tuple[str, str]], nonce: str) -> str:
    build = construct_get_url if method == "GET" else construct_post_url
    base = build(url, sdk_params(pairs))
    signed: bytes = get_signature_v3(TOKEN.encode(), base, nonce.encode())
    return signed.decode()


@pytest.mark.parametrize(("method", "url", "pairs"), REQUESTS)
def test_the_signed_string_and_signature_are_the_sdks(
    method: str, url: str, pairs: list[tuple[str, str]]
) -> None:
    build = construct_get_url if method == "GET" else construct_post_url
    assert v3_base_url(method, url, pairs) == build(url, sdk_params(pairs)).decode()
    ours = v3_signature(TOKEN, method, url, pairs, "12345")
    assert ours == sdk_signature(method, url, pairs, "12345")
    assert validate_v3_signature(method, url, "12345", TOKEN, ours, sdk_params(pairs))
    assert PlivoTrust(auth_token=TOKEN).verify(method, url, pairs, "12345", ours)


def test_forged_or_altered_requests_fail_ours_and_the_sdks() -> None:
    good = sdk_signature("POST", URL, FORM, "n1")
    trust = PlivoTrust(auth_token=TOKEN)
    # Several signatures listed (one per token in use): any one of them is enough.
    assert trust.verify("POST", URL, FORM, "n1", f"forged,{good}")
    assert validate_v3_signature("POST", URL, "n1", TOKEN, f"forged,{good}", sdk_params(FORM))
    altered: list[tuple[str, list[tuple[str, str]], str, str]] = [
        (URL.replace("acme", "other"), FORM, "n1", good),
        (URL, [*FORM, ("x", "1")], "n1", good),
        (URL, FORM, "n2", good),
        (URL, FORM, "n1", good[:-2] + "AA"),
        (URL, FORM, "n1", v3_signature("another-token", "POST", URL, FORM, "n1")),
    ]
    for url, pairs, nonce, signature in altered:
        assert not trust.verify("POST", url, pairs, nonce, signature)
        assert not validate_v3_signature("POST", url, nonce, TOKEN, signature, sdk_params(pairs))
    assert not trust.verify("POST", URL, FORM, None, good)
    assert not trust.verify("POST", URL, FORM, "n1", None)
    assert not PlivoTrust().verify("POST", URL, FORM, "n1", good)


def test_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLIVO_AUTH_TOKEN", TOKEN)
    trust = plivo_trust_from_env()
    assert trust.signed
    assert not trust.problems()
    assert trust.ticket_key != PlivoTrust(auth_token="other").ticket_key
    monkeypatch.delenv("PLIVO_AUTH_TOKEN")
    assert plivo_trust_from_env().problems()
