"""The bus in its "plain" mode (`HOLDLINE_BUS_CLIENT=plain`): nats-py's own client and its
public API only, so the nats-py pin can move before the lean paths (libs/bus/client.py) are
checked against a new version. The core paths run here as the lean ones do elsewhere:
appends guarded and deduplicated, reads of a subject, a durable consumer receiving,
retrying and acknowledging, a request and its reply, a create-once claim. The event store's
whole contract runs in this mode too (tests/component/bus/test_store_contract.py, "plain")."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from libs.bus import (
    BUCKETS,
    ClaimConflict,
    ConcurrencyConflict,
    Context,
    DurableConsumer,
    NatsEventStore,
    Received,
    Topology,
    connect,
    ensure_buckets,
    ensure_streams,
    last_subject_seq,
    read_subject,
    spec_for,
    stream_last_seq,
)
from libs.bus.client import BusClient, BusJetStream, lean_context
from libs.config import BusSettings
from libs.events import OPERATIONS, OperationAdmitted, OperationEvent
from testkit.events import envelope
from testkit.surface import eventually


def _admitted(session: str, op: str) -> Any:
    return envelope(
        OperationAdmitted(tool="t", arguments={"n": op}, tenant_id="t", user_id="u"),
        session_id=session, operation_id=op, intent_key=f"ik-{op}", batch_id="b1",
    )


@pytest.fixture
async def plain(
    bus_settings: BusSettings, topology: Topology
) -> AsyncIterator[tuple[Client, JetStreamContext, NatsEventStore]]:
    settings = replace(bus_settings, client="plain")
    nc = await connect(settings, name="plain")
    js = nc.jetstream()
    await ensure_streams(js, topology, settings)
    await ensure_buckets(js, topology, settings)
    buckets = {p: await js.key_value(topology.bucket(p)) for p in BUCKETS}
    try:
        yield nc, js, NatsEventStore(js, buckets)
    finally:
        for spec in topology.streams():
            await js.delete_stream(spec.name)
        for purpose in BUCKETS:
            await js.delete_key_value(topology.bucket(purpose))
        await nc.close()


def test_the_mode_is_read_from_the_environment_and_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert BusSettings.from_env().client == "lean"
    monkeypatch.setenv("HOLDLINE_BUS_CLIENT", "plain")
    assert BusSettings.from_env().client == "plain"
    monkeypatch.setenv("HOLDLINE_BUS_CLIENT", "fast")
    with pytest.raises(ValueError, match="HOLDLINE_BUS_CLIENT"):
        BusSettings.from_env()


async def test_plain_mode_connects_with_nats_py_s_own_client(
    plain: tuple[Client, JetStreamContext, NatsEventStore],
) -> None:
    nc, js, _ = plain
    assert type(nc) is Client
    assert not isinstance(nc, BusClient)
    assert not isinstance(js, BusJetStream)
    assert lean_context(js) is None


async def test_appends_are_guarded_deduplicated_and_read_back_in_plain_mode(
    plain: tuple[Client, JetStreamContext, NatsEventStore], topology: Topology
) -> None:
    _, js, store = plain
    stream = topology.stream_name(Context.OPERATIONS)
    subject = topology.operation_subject("s1", "op1")
    env = _admitted("s1", "op1")
    first = await store.append(OPERATIONS, subject, env, expected_last_subject_seq=0)
    again = await store.append(OPERATIONS, subject, env)
    assert not first.duplicate
    assert again.duplicate
    assert again.seq == first.seq
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            OPERATIONS, subject, _admitted("s1", "op1"), expected_last_subject_seq=0
        )
    for i in range(3):
        await store.append(OPERATIONS, topology.operation_subject("s2", f"x{i}"),
                           _admitted("s2", f"x{i}"))
    read = await read_subject(js, stream, subject, OPERATIONS)
    assert [i.stream_seq for i in read.items] == [first.seq]
    assert read.items[0].envelope.event_id == env.event_id
    assert await last_subject_seq(js, stream, subject) == first.seq
    assert await last_subject_seq(js, stream, topology.operation_subject("s9", "none")) == 0
    # Consistent reads (replicated streams) check the leader's last sequence first.
    others = await read_subject(
        js, stream, topology.session_filter(Context.OPERATIONS, "s2"), OPERATIONS,
        consistent=True,
    )
    assert [i.envelope.operation_id for i in others.items] == ["x0", "x1", "x2"]
    assert await stream_last_seq(js, stream, timeout_s=2.0) == others.last_seq


async def test_a_durable_consumer_receives_retries_and_acknowledges_in_plain_mode(
    plain: tuple[Client, JetStreamContext, NatsEventStore], topology: Topology
) -> None:
    _, js, store = plain
    seen: list[tuple[str, int]] = []

    async def handle(received: Received[OperationEvent]) -> None:
        op = str(received.envelope.operation_id)
        seen.append((op, received.num_delivered))
        if op == "flaky" and received.num_delivered == 1:
            raise RuntimeError("fails once")

    consumer = DurableConsumer(
        js,
        spec_for(topology, Context.OPERATIONS, durable="plain", ack_wait_s=2.0, max_deliver=3),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
        redelivery_backoff_s=0.05,
        fetch_timeout_s=0.2,
    )
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(consumer.ready.wait(), 10)
        for op in ("a", "flaky", "b"):
            await store.append(OPERATIONS, topology.operation_subject(f"s-{op}", op),
                               _admitted(f"s-{op}", op))

        async def all_handled() -> bool:
            return {op for op, _ in seen} == {"a", "flaky", "b"} and ("flaky", 2) in seen

        await eventually(all_handled, timeout_s=10.0, every_s=0.05)

        async def all_acked() -> bool:
            info = await js.consumer_info(topology.stream_name(Context.OPERATIONS), "plain")
            return info.num_ack_pending == 0 and info.num_pending == 0

        await eventually(all_acked, timeout_s=5.0, every_s=0.05)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
    assert sorted(seen) == [("a", 1), ("b", 1), ("flaky", 1), ("flaky", 2)]


async def test_a_request_gets_its_reply_in_plain_mode(
    plain: tuple[Client, JetStreamContext, NatsEventStore], prefix: str
) -> None:
    nc, _, _ = plain

    async def echo(msg: Msg) -> None:
        await msg.respond(b"re: " + msg.data)

    sub = await nc.subscribe(f"{prefix}.echo", cb=echo)
    try:
        answers = await asyncio.gather(
            *(nc.request(f"{prefix}.echo", f"q{i}".encode(), timeout=2.0) for i in range(5))
        )
    finally:
        await sub.unsubscribe()
    assert [a.data for a in answers] == [f"re: q{i}".encode() for i in range(5)]


async def test_a_key_is_claimed_once_in_plain_mode(
    plain: tuple[Client, JetStreamContext, NatsEventStore],
) -> None:
    _, _, store = plain
    first = await store.claim_once("intents", "ik-1", b"op1|d")
    again = await store.claim_once("intents", "ik-1", b"op1|d")
    assert first.created
    assert not again.created
    assert again.revision == first.revision
    with pytest.raises(ClaimConflict):
        await store.claim_once("intents", "ik-1", b"op2|d")
    assert await store.read_claim("intents", "ik-1") == b"op1|d"
