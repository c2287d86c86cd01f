"""Shared fixtures: one real broker per test run, unique names per test."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from libs.bus import BUCKETS, Topology, connect, ensure_buckets, ensure_streams
from libs.config import BusSettings
from testkit.processes import Broker

_SHARED = pytest.StashKey[Broker]()


# With pytest-xdist (`make test` runs `-n`), the controller starts the one broker of the run
# and hands its address to every worker, so the whole run still shares a single nats-server.
_BROKER_KEY = "holdline_broker"


def pytest_configure(config: pytest.Config) -> None:
    """On the xdist controller, start the run's broker before any worker exists."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    store = Path(tempfile.mkdtemp(prefix="holdline-nats-")) / "store"
    server = Broker(store=store)
    server.start()
    config.stash[_SHARED] = server


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist hook: tell a new worker where the shared broker listens."""
    server = node.config.stash.get(_SHARED, None)
    if server is not None:
        where = {"port": server.port, "store": str(server.store)}
        node.workerinput[_BROKER_KEY] = json.dumps(where)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the broker the controller started."""
    server = config.stash.get(_SHARED, None)
    if server is not None:
        server.stop()
        shutil.rmtree(server.store.parent, ignore_errors=True)


@pytest.fixture(scope="session")
def broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Broker]:
    """The run's shared nats-server (JetStream, file storage in a temp dir)."""
    shared = getattr(request.config, "workerinput", {}).get(_BROKER_KEY)
    if shared is not None:
        # Owned by the controller: this worker neither starts nor stops it.
        where = json.loads(shared)
        yield Broker(store=Path(where["store"]), port=int(where["port"]))
        return
    server = Broker(store=tmp_path_factory.mktemp("nats") / "store")
    server.start()
    yield server
    server.stop()


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
