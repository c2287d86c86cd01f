"""The broker's users: a service's NATS user cannot listen to, or append to, another's subjects.

A nats-server starts on the configuration `make run-cluster` writes (libs/broker_access.py,
permissions derived from services/*/consumers.py). Each refusal is checked against the same
action by the user that owns it, so a test cannot pass on a broker that refuses everything.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.js.api import StreamConfig

from libs.broker_access import declared_users, inbox_for, new_passwords, server_config
from libs.broker_tls import cluster_security
from libs.bus import Context, Topology, connect
from libs.config import BusSettings
from testkit.processes import Broker

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def topology(prefix: str) -> Topology:
    """Subjects of this test only."""
    return Topology(prefix)


@pytest.fixture
def passwords(topology: Topology) -> dict[str, str]:
    """Fresh passwords for every declared user."""
    return new_passwords(declared_users(topology))


@pytest.fixture
def guarded(tmp_path: Path, topology: Topology, passwords: dict[str, str]) -> Iterator[Broker]:
    """A nats-server of its own, on the generated users and permissions."""
    config = tmp_path / "node.conf"
    config.write_text(server_config(declared_users(topology), passwords))
    broker = Broker(store=tmp_path / "store", args=("-c", str(config)))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Session:
    """One user's connection and the permission errors the broker sent it."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc = Client()

    async def open(self, url: str, user: str, password: str) -> Client:
        async def on_error(exc: Exception) -> None:
            self.errors.append(str(exc))

        await self.nc.connect(
            servers=[url], user=user, password=password, error_cb=on_error,
            inbox_prefix=inbox_for(user), allow_reconnect=False, connect_timeout=5,
        )
        return self.nc

    async def violations(self, what: str, timeout_s: float = 5.0) -> list[str]:
        """The permission errors naming `what`, once one arrives (bounded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while loop.time() < deadline:
            await self.nc.flush()
            found = [
                e for e in self.errors
                if "permissions violation" in e.lower() and what.lower() in e.lower()
            ]
            if found:
                return found
            await asyncio.sleep(0.05)
        return []


@pytest.fixture
async def users(
    guarded: Broker, passwords: dict[str, str]
) -> AsyncIterator[dict[str, Session]]:
    """A connection per service user."""
    sessions = {name: Session() for name in ("interaction-surface", "delivery-policy")}
    for name, session in sessions.items():
        await session.open(guarded.url, name, passwords[name])
    yield sessions
    for session in sessions.values():
        await session.nc.close()


async def test_a_user_cannot_listen_to_another_services_stream(
    users: dict[str, Session], topology: Topology
) -> None:
    surface, policy = users["interaction-surface"], users["delivery-policy"]
    subject = topology.session_subject("s1")
    heard: list[bytes] = []

    async def listen(msg: nats.aio.msg.Msg) -> None:
        heard.append(msg.data)

    await policy.nc.subscribe(topology.context_filter(Context.INTERACTION), cb=listen)
    assert await policy.violations("subscription"), policy.errors
    await surface.nc.publish(subject, b"what ana said")
    await surface.nc.flush()
    await asyncio.sleep(0.3)
    assert heard == []
    assert not surface.errors  # the surface may append to its own stream


async def test_a_user_cannot_read_another_users_inbox(
    users: dict[str, Session], topology: Topology
) -> None:
    surface, policy = users["interaction-surface"], users["delivery-policy"]
    await policy.nc.subscribe(f"{inbox_for('interaction-surface')}.>")
    assert await policy.violations(inbox_for("interaction-surface"))
    await policy.nc.subscribe("_INBOX.>")
    assert await policy.violations("_INBOX.>")
    # Its own inbox is allowed: the JetStream API answers it.
    info = await policy.nc.jetstream().account_info()
    assert info is not None
    assert not await surface.violations("", timeout_s=0.2)


async def test_a_user_cannot_append_to_another_services_stream(
    users: dict[str, Session], topology: Topology
) -> None:
    surface, policy = users["interaction-surface"], users["delivery-policy"]
    stream = topology.stream_name(Context.INTERACTION)
    js = surface.nc.jetstream()
    await js.add_stream(
        StreamConfig(name=stream, subjects=[topology.context_filter(Context.INTERACTION)])
    )
    subject = topology.session_subject("s1")
    # The owner appends; the policy's append is dropped by the broker, never stored.
    await js.publish(subject, b"opened")
    with pytest.raises(nats.errors.TimeoutError):
        await policy.nc.jetstream().publish(subject, b"forged", timeout=1.0)
    assert await policy.violations("publish")
    assert (await js.stream_info(stream)).state.messages == 1


async def test_a_service_reads_its_durable_through_its_own_inbox(
    users: dict[str, Session], topology: Topology
) -> None:
    surface, policy = users["interaction-surface"], users["delivery-policy"]
    stream = topology.stream_name(Context.DELIVERIES)
    await surface.nc.jetstream().add_stream(
        StreamConfig(name=stream, subjects=[topology.context_filter(Context.DELIVERIES)])
    )
    await surface.nc.jetstream().publish(topology.delivery_event_subject("s1", "d1", "ready"), b"x")
    sub = await policy.nc.jetstream().pull_subscribe(
        topology.context_filter(Context.DELIVERIES), durable="delivery-policy-test", stream=stream
    )
    [msg] = await sub.fetch(1, timeout=5)
    assert msg.data == b"x"
    await msg.ack()
    assert not await policy.violations("", timeout_s=0.3), policy.errors


async def test_the_cluster_nodes_require_tls_and_a_service_connects_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`make run-cluster`'s node configuration (TLS and users): a plain or unauthenticated
    client is refused; a service connects with its settings the way the supervisor gives
    them."""
    security, env = cluster_security(tmp_path)
    config = tmp_path / "node.conf"
    config.write_text(security)
    broker = Broker(store=tmp_path / "store", args=("-c", str(config)))
    broker.start()
    try:
        with pytest.raises(Exception):  # noqa: B017, PT011 - plain TCP: refused, whatever the error
            await nats.connect(broker.url, allow_reconnect=False, connect_timeout=2)
        mine = env["delivery_policy"]
        monkeypatch.setenv("HOLDLINE_NATS_INBOX_PREFIX", mine["HOLDLINE_NATS_INBOX_PREFIX"])
        settings = BusSettings(
            nats_url=broker.url, nats_user=mine["NATS_USER"],
            nats_password=mine["NATS_PASSWORD"], nats_tls_ca=mine["NATS_TLS_CA"],
        )
        nc = await connect(settings, name="delivery-policy")
        try:
            assert (await nc.jetstream().account_info()) is not None
        finally:
            await nc.close()
    finally:
        broker.stop()
