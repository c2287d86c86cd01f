"""Twilio signatures and call tickets without a running system.

Every signature here is computed by the official `twilio` package (`RequestValidator`), and
holdline's verdict is compared with that validator's own on the same request.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from twilio.request_validator import RequestValidator, get_signature_algorithm

from services.interaction_surface.voice.settings import trust_from_env
from services.interaction_surface.voice.trust import (
    HMAC_SHA256,
    TelephonyMisconfigured,
    TicketRefused,
    TrustSettings,
    check_ticket,
    form_pairs,
    is_local,
    issue_ticket,
    public_url,
    signature_settings,
    stream_url,
    text_params,
    url_forms,
)

TOKEN = "12345678901234567890123456789012"
WEBHOOK = "https://calls.example.com/v1/telephony/twilio/voice?tenant_id=acme"
FORM = [("CallSid", "CA1"), ("From", "+15550001111"), ("To", "+15550002222")]
TRUST = TrustSettings(auth_token=TOKEN)


class MultiDict(dict[str, list[str]]):
    """A form with repeated keys, as the validator reads one (Flask's `getall`)."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__()
        for key, value in pairs:
            self.setdefault(key, []).append(value)

    def getall(self, key: str) -> list[str]:
        return self[key]


def official(url: str, pairs: list[tuple[str, str]], algorithm: str | None = None,
             secret: str = TOKEN) -> str:
    return RequestValidator(secret).compute_signature(url, MultiDict(pairs), algorithm)


def agree(url: str, pairs: list[tuple[str, str]], signature: str) -> bool:
    """holdline's verdict, asserted equal to the official validator's."""
    ours = TRUST.verify(url, pairs, signature)
    theirs = RequestValidator(TOKEN).validate(url, MultiDict(pairs), signature)
    assert ours == theirs, (url, pairs, ours, theirs)
    return ours


def test_a_plain_signed_webhook() -> None:
    assert agree(WEBHOOK, FORM, official(WEBHOOK, FORM))
    assert not agree(WEBHOOK, FORM, official(WEBHOOK, FORM, secret="another-token"))
    assert not agree(WEBHOOK, [*FORM[:2], ("To", "+1")], official(WEBHOOK, FORM))
    assert not TRUST.verify(WEBHOOK, FORM, None)
    assert not TRUST.verify(WEBHOOK, FORM, "")


@pytest.mark.parametrize(
    ("signed", "served"),
    [
        # Twilio may sign with the default port while the request is checked without it...
        ("https://calls.example.com:443/v1/telephony/twilio/voice",
         "https://calls.example.com/v1/telephony/twilio/voice"),
        # ...or without it while the configured URL names it.
        ("https://calls.example.com/v1/telephony/twilio/voice",
         "https://calls.example.com:443/v1/telephony/twilio/voice"),
        ("http://calls.example.com:80/v1/telephony/twilio/voice?x=1",
         "http://calls.example.com/v1/telephony/twilio/voice?x=1"),
        # A non-default port: the signature without any port is also accepted.
        ("https://calls.example.com/v1/telephony/twilio/voice",
         "https://calls.example.com:8443/v1/telephony/twilio/voice"),
    ],
)
def test_both_port_forms(signed: str, served: str) -> None:
    assert agree(served, FORM, official(signed, FORM))


def test_every_value_of_a_repeated_key() -> None:
    pairs = [*FORM, ("StirVerstat", "TN-Validation-Passed-A"), ("StirVerstat", "B"),
             ("Digits", "1"), ("Digits", "1")]
    signature = official(WEBHOOK, pairs)
    assert agree(WEBHOOK, pairs, signature)
    # The last value alone (what a plain dict keeps) is not what Twilio signed.
    assert not agree(WEBHOOK, [*FORM, ("StirVerstat", "B"), ("Digits", "1")], signature)
    # Order of the pairs does not matter; a repeated identical value counts once.
    assert agree(WEBHOOK, list(reversed(pairs[:-1])), signature)


def test_a_signature_over_another_url() -> None:
    signature = official("https://evil.example.com/v1/telephony/twilio/voice", FORM)
    assert not agree(WEBHOOK, FORM, signature)
    signature = official(WEBHOOK.replace("tenant_id=acme", "tenant_id=other"), FORM)
    assert not agree(WEBHOOK, FORM, signature)


def test_the_stream_url_signature() -> None:
    url = "wss://calls.example.com/v1/telephony/twilio"
    assert TRUST.verify(url, [], official(url, []))
    # With the default port of wss (the validator itself would add :80 to any non-https URL).
    assert TRUST.verify(url, [], official("wss://calls.example.com:443/v1/telephony/twilio", []))
    assert not TRUST.verify(url, [], official("ws://calls.example.com/v1/telephony/twilio", []))


def test_hmac_sha256_with_a_shared_key() -> None:
    shared = TrustSettings(auth_token=TOKEN, shared_keys={"webhooks_sharedkey_1": "s3cret"})
    header = "key=webhooks_sharedkey_1,algorithm=HMAC_SHA256"
    assert get_signature_algorithm(header) == HMAC_SHA256
    assert signature_settings(header) == (HMAC_SHA256, "webhooks_sharedkey_1")
    signature = official(WEBHOOK, FORM, get_signature_algorithm(header), secret="s3cret")
    assert RequestValidator("s3cret").validate(WEBHOOK, MultiDict(FORM), signature, HMAC_SHA256)
    assert shared.verify(WEBHOOK, FORM, signature, header)
    # Without the header the same signature is not an auth-token SHA-1 one.
    assert not shared.verify(WEBHOOK, FORM, signature)
    # An unknown key id, or an algorithm neither side supports, is refused.
    assert not shared.verify(WEBHOOK, FORM, signature, "key=other,algorithm=HMAC_SHA256")
    assert not shared.verify(WEBHOOK, FORM, signature, "key=webhooks_sharedkey_1,algorithm=MD5")
    assert not RequestValidator("s3cret").validate(WEBHOOK, MultiDict(FORM), signature, "MD5")
    # The header naming only the algorithm: the auth token is the secret.
    token_sha256 = official(WEBHOOK, FORM, HMAC_SHA256)
    assert shared.verify(WEBHOOK, FORM, token_sha256, "algorithm=HMAC_SHA256")


def test_url_forms() -> None:
    assert url_forms("https://h.example/x?y=1") == ("https://h.example/x?y=1",
                                                    "https://h.example:443/x?y=1")
    assert url_forms("wss://h.example:443/x") == ("wss://h.example/x", "wss://h.example:443/x")
    assert url_forms("http://[::1]:8080/x") == ("http://[::1]/x", "http://[::1]:8080/x")


PROXY = TrustSettings(auth_token=TOKEN,
                      trusted_proxies=(ipaddress.ip_network("10.0.0.0/8"),))
BEHIND_TLS = {"x-forwarded-proto": "https", "x-forwarded-host": "calls.example.com",
              "x-forwarded-for": "54.0.0.1"}


def test_the_public_url_behind_a_proxy_that_terminates_tls() -> None:
    served = "http://10.1.2.3:8080/v1/telephony/twilio/voice?tenant_id=acme"
    # A trusted proxy: its forwarded scheme and host are what Twilio signed.
    assert public_url(PROXY, served, "10.0.0.7", BEHIND_TLS) == WEBHOOK
    assert stream_url(WEBHOOK, "/v1/telephony/twilio") == (
        "wss://calls.example.com/v1/telephony/twilio"
    )
    ws = public_url(PROXY, "ws://10.1.2.3:8080/v1/telephony/twilio", "10.0.0.7", BEHIND_TLS)
    assert ws == "wss://calls.example.com/v1/telephony/twilio"
    # Anyone else's forwarded headers are ignored.
    assert public_url(PROXY, served, "54.0.0.1", BEHIND_TLS) == served
    assert public_url(TRUST, served, "10.0.0.7", BEHIND_TLS) == served
    # A forwarded port that is not the default stays; the default one goes.
    ported = {**BEHIND_TLS, "x-forwarded-port": "8443"}
    assert public_url(PROXY, served, "10.0.0.7", ported).startswith(
        "https://calls.example.com:8443/"
    )
    assert public_url(PROXY, served, "10.0.0.7", {**BEHIND_TLS, "x-forwarded-port": "443"}) == (
        WEBHOOK
    )
    # HOLDLINE_PUBLIC_URL wins over everything.
    fixed = TrustSettings(auth_token=TOKEN, public_url="https://calls.example.com")
    assert public_url(fixed, served, "54.0.0.1", {}) == WEBHOOK
    signature = official(WEBHOOK, FORM)
    assert PROXY.verify(public_url(PROXY, served, "10.0.0.7", BEHIND_TLS), FORM, signature)


def test_only_unproxied_loopback_peers_are_local() -> None:
    assert is_local("127.0.0.1", {})
    assert is_local("::1", {})
    assert not is_local("192.0.2.10", {})
    assert not is_local(None, {})
    assert not is_local("not-an-ip", {})
    for header in ("x-forwarded-for", "forwarded", "x-forwarded-proto", "x-real-ip"):
        assert not is_local("127.0.0.1", {header: "1.2.3.4"})


KEY = TRUST.ticket_key
PARAMS = {"user_id": "tel-15550100", "tenant_id": "acme"}
NOW = 1_800_000_000.0


def refused(ticket: str, call_sid: str = "CA1", params: dict[str, str] = PARAMS,
            now: float = NOW) -> str:
    with pytest.raises(TicketRefused) as caught:
        check_ticket(KEY, ticket, call_sid, {**params, "ticket": ticket}, now=now)
    return caught.value.reason


def test_a_ticket_opens_only_its_own_call_until_it_expires() -> None:
    ticket = issue_ticket(KEY, "CA1", PARAMS, now=NOW, ttl_s=300)
    nonce = check_ticket(KEY, ticket, "CA1", {**PARAMS, "ticket": ticket}, now=NOW + 299)
    assert len(nonce) == 24
    assert issue_ticket(KEY, "CA1", PARAMS, now=NOW, ttl_s=300) != ticket  # a fresh nonce
    assert refused(ticket, now=NOW + 301) == "ticket_expired"
    assert refused(ticket, call_sid="CA2") == "ticket_invalid"
    assert refused(ticket, params={**PARAMS, "user_id": "victim"}) == "ticket_invalid"
    assert refused(ticket, params={**PARAMS, "extra": "1"}) == "ticket_invalid"
    other_key = TrustSettings(auth_token="another-token").ticket_key
    assert refused(issue_ticket(other_key, "CA1", PARAMS, now=NOW, ttl_s=300)) == (
        "ticket_invalid"
    )
    version, expires, nonce_part, mac = ticket.split(".")
    # A later expiry under the same MAC is a forgery, not an extension.
    assert refused(f"{version}.{int(expires) + 999}.{nonce_part}.{mac}") == "ticket_invalid"
    for bad in ("", "v1", "v2.1.2.3", f"v1.x.{nonce_part}.{mac}", f"v1.{expires}.zz.{mac}"):
        assert refused(bad) == "ticket_malformed"


def test_bad_parameters() -> None:
    assert text_params({"user_id": "u", "n": 5}) == {"user_id": "u", "n": "5"}
    assert text_params(None) == {}
    for bad in ([], "x", {"a": {"b": 1}}, {"a": None}, {"a": True}, {"a": "x" * 2000},
                {f"k{i}": "v" for i in range(100)}):
        assert text_params(bad) is None, bad
    with pytest.raises(UnicodeDecodeError):
        form_pairs(b"From=%FF%FE")
    assert form_pairs(b"a=1&a=2&b=") == [("a", "1"), ("a", "2"), ("b", "")]


def env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for name in ("TWILIO_AUTH_TOKEN", "HOLDLINE_PUBLIC_URL", "HOLDLINE_TRUSTED_PROXIES",
                 "TWILIO_WEBHOOK_SHARED_KEYS", "HOLDLINE_REQUIRE_TWILIO_AUTH"):
        monkeypatch.delenv(name, raising=False)
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def test_the_start_up_check_says_what_is_misconfigured(monkeypatch: pytest.MonkeyPatch) -> None:
    env(monkeypatch)
    (only,) = trust_from_env().problems()
    assert "TWILIO_AUTH_TOKEN is not set" in only
    env(monkeypatch, TWILIO_AUTH_TOKEN=TOKEN)
    (only,) = trust_from_env().problems()
    assert "neither HOLDLINE_PUBLIC_URL nor HOLDLINE_TRUSTED_PROXIES" in only
    env(monkeypatch, TWILIO_AUTH_TOKEN=TOKEN, HOLDLINE_PUBLIC_URL="http://calls.example.com/x")
    problems: list[Any] = trust_from_env().problems()
    assert any("31922" in p for p in problems)
    assert any("without a path" in p for p in problems)
    env(monkeypatch, TWILIO_AUTH_TOKEN=TOKEN, HOLDLINE_PUBLIC_URL="https://calls.example.com/")
    assert trust_from_env().problems() == []
    assert trust_from_env().public_url == "https://calls.example.com"
    env(monkeypatch, TWILIO_WEBHOOK_SHARED_KEYS="k1:secret")
    assert any("without TWILIO_AUTH_TOKEN" in p for p in trust_from_env().problems())
    env(monkeypatch, TWILIO_AUTH_TOKEN=TOKEN, HOLDLINE_TRUSTED_PROXIES="10.0.0.0/8, ::1")
    assert trust_from_env().problems() == []
    for name, value, match in (
        ("HOLDLINE_TRUSTED_PROXIES", "10.0.0.0/8,proxy.local", "proxy.local"),
        ("TWILIO_WEBHOOK_SHARED_KEYS", "nokey", "key_id:secret"),
        ("HOLDLINE_REQUIRE_TWILIO_AUTH", "1", "TWILIO_AUTH_TOKEN is not set"),
    ):
        env(monkeypatch, **{name: value})
        with pytest.raises(TelephonyMisconfigured, match=match):
            trust_from_env()
    env(monkeypatch, HOLDLINE_REQUIRE_TWILIO_AUTH="1", TWILIO_AUTH_TOKEN=TOKEN)
    assert trust_from_env().signed
