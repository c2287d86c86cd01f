"""Shared fixtures: one real broker per test run, unique names per test (logic: testkit)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from libs.bus import BUCKETS, Topology, connect, ensure_buckets, ensure_streams
from libs.config import BusSettings
from testkit import shared_broker
from testkit.processes import Broker


def pytest_configure(config: pytest.Config) -> None:
    shared_broker.start_for_workers(config)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist hook: tell a new worker where the shared broker listens."""
    shared_broker.hand_to_worker(node)


def pytest_unconfigure(config: pytest.Config) -> None:
    shared_broker.stop_for_workers(config)


@pytest.fixture(scope="session")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Broker]:
    """The run's shared nats-server (JetStream, file storage in a temp dir)."""
    yield from shared_broker.run_broker(request.config, tmp_path_factory)


@pytest.fixture
def prefix() -> str:
    """A stream/subject prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def bus_settings(broker: Broker, prefix: str) -> BusSettings:
    """Settings with short timings, pointed at the shared broker."""
    return BusSettings(
        nats_url=broker.url,
        prefix=prefix,
        ack_wait_s=2.0,
        max_deliver=3,
        redelivery_backoff_s=0.05,
        duplicate_window_s=60.0,
    )


@pytest.fixture
def topology(prefix: str) -> Topology:
    """The names for this test's prefix."""
    return Topology(prefix)


@pytest.fixture
async def nats_client(bus_settings: BusSettings) -> AsyncIterator[Client]:
    """A connected client; closed after the test."""
    nc = await connect(bus_settings, name="test")
    yield nc
    await nc.close()


@pytest.fixture
async def js(
    nats_client: Client, topology: Topology, bus_settings: BusSettings
) -> AsyncIterator[JetStreamContext]:
    """JetStream with every stream and bucket of this test's topology declared."""
    ctx = nats_client.jetstream()
    await ensure_streams(ctx, topology, bus_settings)
    await ensure_buckets(ctx, topology, bus_settings)
    yield ctx
    for spec in topology.streams():
        await ctx.delete_stream(spec.name)
    for purpose in BUCKETS:
        await ctx.delete_key_value(topology.bucket(purpose))


@pytest.fixture
def logs_dir(tmp_path: Path) -> Path:
    """Where a test's child processes write their logs."""
    path = tmp_path / "logs"
    path.mkdir()
    return path
