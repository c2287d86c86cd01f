"""The provider's engine over a real SQLite file: how many durable writes a request costs.

In-process (no HTTP), so the store can be watched: each ``transaction()`` is one commit,
that is one fsync of the write-ahead log under ``synchronous=FULL``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from demo.sandbox_provider.callbacks import CallbackSender
from demo.sandbox_provider.completion import PendingCommits
from demo.sandbox_provider.engine import Engine
from demo.sandbox_provider.fault_rules import FaultBody, FaultEffect
from demo.sandbox_provider.faults import FaultRegistry
from demo.sandbox_provider.metrics import Metrics
from demo.sandbox_provider.settings import Settings
from demo.sandbox_provider.store import Store
from demo.sandbox_provider.validation import parse_create

NO_FAULT = FaultEffect()


class CountingStore(Store):
    """The real store, counting its committed transactions."""

    commits = 0

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with super().transaction():
            yield
        self.commits += 1


class Rig:
    def __init__(self, store: CountingStore, engine: Engine, faults: FaultRegistry) -> None:
        self.store, self.engine, self.faults = store, engine, faults

    async def grant(self, key: str, user: str = "u1") -> int:
        command = parse_create(
            "access", {"tenant_id": "t1", "user_id": user, "resource": "door-a"}
        )
        reply = await self.engine.create(
            command, key=key, ignore_idempotency=False, request_fault=NO_FAULT,
            business_code=None, want_async=False, callback_twice=False,
        )
        return reply.status


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    settings = Settings.from_env(
        {"SANDBOX_PROVIDER_DB": str(tmp_path / "p.sqlite3"), "HOLDLINE_CALLBACK_URL": "off"}
    )
    store = CountingStore.open(settings.db_path)
    metrics, faults = Metrics(), FaultRegistry()
    callbacks = CallbackSender(store, settings, metrics)
    engine = Engine(
        store, settings, faults=faults, callbacks=callbacks, metrics=metrics,
        commits=PendingCommits(store, callbacks, metrics),
    )
    engine.start()
    yield Rig(store, engine, faults)
    await engine.stop()
    store.close()


async def test_a_request_with_nothing_to_wait_for_commits_once(rig: Rig) -> None:
    before = rig.store.commits
    assert await rig.grant("k-1") == 201
    # The key's claim and the effect with its stored answer land in one commit.
    assert rig.store.commits - before == 1
    assert await rig.grant("k-1") == 201  # replayed from the stored answer
    assert rig.store.commits - before == 1
    assert [row["effects"] for row in rig.store.ledger(kind="access")] == [1]


async def test_a_zero_latency_fault_is_no_wait(rig: Rig) -> None:
    rig.faults.add(FaultBody(match="door-a", latency_ms=0, times=1))
    before = rig.store.commits
    assert await rig.grant("k-0") == 201
    assert rig.store.commits - before == 1


async def test_a_delayed_request_claims_its_key_first_and_a_twin_sees_it_in_flight(
    rig: Rig,
) -> None:
    rig.faults.add(FaultBody(match="door-a", latency_ms=300, times=1))
    before = rig.store.commits
    first = asyncio.create_task(rig.grant("k-2"))
    await asyncio.sleep(0.1)
    # While the first waits out its latency, its claim is visible: the twin is refused.
    assert rig.store.key_in_flight("k-2")
    assert await rig.grant("k-2") == 409
    assert await first == 201
    assert rig.store.commits - before == 2
    assert not rig.store.key_in_flight("k-2")
    assert [row["effects"] for row in rig.store.ledger(kind="access")] == [1]
