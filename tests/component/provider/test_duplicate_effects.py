"""`holdline_duplicate_side_effects` counts what the provider's ledger shows, no more, no less.

A real sandbox provider process; the client plays a caller that lost a response and sent
again with the same idempotency key. With idempotency not honoured (the provider's transfer
fault mode) each resend is a new effect: the counter on the provider's `/metrics` moves by
exactly the effects beyond the first that the ledger holds for the key, for immediate and
asynchronous commits alike. With idempotency honoured the resends are replays and it stays 0.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.component.provider.harness import CallbackServer, ProviderProcess, provider_env

SENDS = 3


@pytest.fixture(scope="module")
def callbacks() -> Iterator[CallbackServer]:
    """Where async commits report back (the provider needs somewhere to call)."""
    server = CallbackServer().start()
    yield server
    server.close()


@pytest.fixture
def provider_client(
    tmp_path: Path, callbacks: CallbackServer, request: pytest.FixtureRequest
) -> Iterator[httpx.Client]:
    """A client of a provider started with idempotency ignored (param True) or honoured."""
    env = provider_env(
        tmp_path / "sandbox.sqlite3",
        callbacks.url,
        SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY="1" if request.param else "0",
        SANDBOX_HANG_AFTER_COMMIT_S="1",
        SANDBOX_ASYNC_DELAY_MS="100",
    )
    provider = ProviderProcess(env, tmp_path / "provider.log").start()
    try:
        with provider.client() as client:
            yield client
    finally:
        provider.stop()


def _transfer(to_account: str) -> dict[str, Any]:
    return {
        "tenant_id": "acme",
        "user_id": "u-1",
        "from_account": "checking",
        "to_account": to_account,
        "amount_cents": 4_200,
        "currency": "EUR",
        "reference": f"op-{uuid.uuid4().hex[:8]}",
    }


def _duplicates(client: httpx.Client) -> float:
    text = client.get("/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "holdline_duplicate_side_effects"
        for sample in family.samples
        if sample.name == "holdline_duplicate_side_effects_total"
    )


def _ledger_duplicates(client: httpx.Client) -> int:
    entries = client.get("/ledger").json()["entries"]
    return sum(max(0, int(e["effects"]) - 1) for e in entries)


def _send_after_lost_responses(client: httpx.Client, *, asynchronous: bool) -> str:
    """One transfer sent SENDS times with one key: every answer but the last is lost."""
    key = f"k-{uuid.uuid4().hex[:10]}"
    body = _transfer(f"acct-{uuid.uuid4().hex[:6]}")
    headers = {"Idempotency-Key": key}
    if asynchronous:
        headers["X-Sandbox-Async"] = "1"
    lost = 0
    for _ in range(SENDS - 1):
        # A commit hangs before answering: the caller's wait runs out and the answer is lost
        # (a provider honouring the key replays its stored answer to a resend instead).
        try:
            client.post(
                "/v1/transfers",
                json=body,
                headers={**headers, "X-Sandbox-Fault-Timeout-After-Commit": "1"},
                timeout=0.3,
            )
        except httpx.ReadTimeout:
            lost += 1
    assert lost >= 1
    answer = client.post("/v1/transfers", json=body, headers=headers)
    assert answer.status_code in (200, 201, 202), answer.text
    return key


def _settled(client: httpx.Client, key: str, effects: int) -> None:
    """Wait (bounded) until the ledger counts `effects` for the key (async commits lag)."""
    deadline = time.monotonic() + 10.0
    found = -1
    while time.monotonic() < deadline:
        entries = client.get("/ledger", params={"kind": "transfer", "key": key}).json()["entries"]
        found = int(entries[0]["effects"]) if entries else 0
        if found == effects:
            return
        time.sleep(0.05)
    raise AssertionError(f"ledger has {found} effects for {key}, expected {effects}")


@pytest.mark.parametrize("provider_client", [True], indirect=True, ids=["keys-ignored"])
def test_counter_moves_by_the_duplicates_the_ledger_shows_when_keys_are_ignored(
    provider_client: httpx.Client,
) -> None:
    client = provider_client
    assert _duplicates(client) == 0
    sync_key = _send_after_lost_responses(client, asynchronous=False)
    _settled(client, sync_key, SENDS)
    assert _duplicates(client) == SENDS - 1 == _ledger_duplicates(client)
    async_key = _send_after_lost_responses(client, asynchronous=True)
    _settled(client, async_key, SENDS)
    assert _duplicates(client) == 2 * (SENDS - 1) == _ledger_duplicates(client)


@pytest.mark.parametrize("provider_client", [False], indirect=True, ids=["keys-honoured"])
def test_counter_stays_zero_when_keys_are_honoured(provider_client: httpx.Client) -> None:
    for asynchronous in (False, True):
        key = _send_after_lost_responses(provider_client, asynchronous=asynchronous)
        _settled(provider_client, key, 1)
    assert _duplicates(provider_client) == 0 == _ledger_duplicates(provider_client)
