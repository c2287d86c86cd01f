"""Sandbox provider settings from the environment (pure: no process, no I/O)."""

from __future__ import annotations

from pathlib import Path

import pytest

from demo.sandbox_provider.settings import Settings


def test_defaults_match_the_documented_contract() -> None:
    settings = Settings.from_env({})
    assert (settings.host, settings.port) == ("127.0.0.1", 8090)
    assert settings.db_path == Path(".data/sandbox_provider.sqlite3")
    assert settings.callback_url == "http://127.0.0.1:8091/v1/callbacks/sandbox"
    # No shared public key: unset, each process signs with a random one of its own.
    assert settings.callback_secret not in (b"", b"holdline-dev-callback-secret")
    assert Settings.from_env({}).callback_secret != settings.callback_secret
    assert settings.async_delay_s == 0.5
    assert settings.hang_after_commit_s == 30.0
    assert settings.transfers_ignore_idempotency is False


def test_values_are_parsed_and_callbacks_can_be_turned_off() -> None:
    settings = Settings.from_env(
        {
            "SANDBOX_PROVIDER_PORT": "9000",
            "SANDBOX_PROVIDER_DB": "/tmp/x/db.sqlite3",
            "HOLDLINE_CALLBACK_URL": "off",
            "HOLDLINE_CALLBACK_SECRET": "k",
            "SANDBOX_ASYNC_DELAY_MS": "250",
            "SANDBOX_HANG_AFTER_COMMIT_S": "1.5",
            "SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY": "true",
        }
    )
    assert settings.port == 9000
    assert settings.db_path == Path("/tmp/x/db.sqlite3")
    assert settings.callback_url is None
    assert settings.callback_secret == b"k"
    assert settings.async_delay_s == 0.25
    assert settings.hang_after_commit_s == 1.5
    assert settings.transfers_ignore_idempotency is True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SANDBOX_PROVIDER_PORT", "http"),
        ("SANDBOX_PROVIDER_PORT", "70000"),
        ("SANDBOX_ASYNC_DELAY_MS", "-1"),
        ("SANDBOX_HANG_AFTER_COMMIT_S", "nan"),
        ("SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY", "maybe"),
        ("HOLDLINE_CALLBACK_URL", "ftp://example"),
    ],
)
def test_bad_values_fail_loudly(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        Settings.from_env({name: value})
