"""The other carriers' settings: secrets, the tickets they key, and what is refused at start."""

from __future__ import annotations

import pytest

from services.interaction_surface.voice.carrier_settings import (
    CarrierSettings,
    ExotelSettings,
    VonageSettings,
)
from services.interaction_surface.voice.trust import (
    TelephonyMisconfigured,
    TicketRefused,
    TrustSettings,
    check_ticket,
    issue_ticket,
)

pytestmark = pytest.mark.fast

PARAMS = {"user_id": "tel-1", "tenant_id": "acme"}


def test_each_carrier_keys_its_own_tickets() -> None:
    secret = "one-secret-everywhere"
    vonage = VonageSettings(signature_secret=secret).trust
    exotel = ExotelSettings(user="one-secret", password="everywhere").trust
    twilio = TrustSettings(auth_token=secret)
    keys = {vonage.ticket_key, exotel.ticket_key, twilio.ticket_key}
    assert len(keys) == 3
    ticket = issue_ticket(vonage.ticket_key, "call-1", PARAMS, now=1000.0, ttl_s=300)
    assert check_ticket(vonage.ticket_key, ticket, "call-1", PARAMS, now=1001.0)
    for other in (exotel.ticket_key, twilio.ticket_key):
        with pytest.raises(TicketRefused):
            check_ticket(other, ticket, "call-1", PARAMS, now=1001.0)


def test_unset_secrets_serve_local_requests_only() -> None:
    settings = CarrierSettings()
    assert not settings.vonage.trust.signed
    assert not settings.exotel.trust.signed
    assert ExotelSettings(user="u", password="p").trust.signed


def test_from_env_reads_and_refuses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VONAGE_SIGNATURE_SECRET", "s")
    monkeypatch.setenv("HOLDLINE_VONAGE_AUDIO_RATE", "8000")
    monkeypatch.setenv("EXOTEL_STREAM_USER", "u")
    monkeypatch.setenv("EXOTEL_STREAM_PASSWORD", "p")
    settings = CarrierSettings.from_env(120.0)
    assert settings.vonage.audio_rate == 8000
    assert settings.vonage.ticket_ttl_s == 120.0
    assert settings.exotel.trust.signed
    monkeypatch.setenv("HOLDLINE_VONAGE_AUDIO_RATE", "44100")
    with pytest.raises(TelephonyMisconfigured):
        VonageSettings.from_env()
    monkeypatch.delenv("EXOTEL_STREAM_PASSWORD")
    with pytest.raises(TelephonyMisconfigured):
        ExotelSettings.from_env()
