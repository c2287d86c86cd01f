"""A broker crash (kill -9) with file storage loses no acknowledged event."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from libs.bus import (
    Context,
    DurableConsumer,
    Received,
    Topology,
    connect,
    ensure_streams,
    replay,
    spec_for,
)
from libs.config import BusSettings
from libs.events import OPERATIONS, OperationAdmitted, OperationEvent
from testkit.events import envelope
from testkit.processes import Broker
from testkit.writer import append

# nats-server's file store keeps a consumer's state in `obs/<durable>/o.dat`: a magic byte, a
# version (2), then the ack floor as two unsigned varints, consumer sequence then stream's.
_STATE_MAGIC, _STATE_VERSION = 22, 2


def _uvarint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def _stored_ack_floor(store: Path, durable: str) -> int | None:
    """The stream sequence of the consumer's ack floor as written to disk, if readable."""
    for path in store.glob(f"jetstream/*/streams/*/obs/{durable}/o.dat"):
        data = path.read_bytes()
        if len(data) < 4 or (data[0], data[1]) != (_STATE_MAGIC, _STATE_VERSION):
            return None
        try:
            _, at = _uvarint(data, 2)
            return _uvarint(data, at)[0]
        except IndexError:  # caught mid-write
            return None
    return None


async def _ack_floor_on_disk(store: Path, durable: str, seq: int, timeout_s: float = 10) -> None:
    """Until the broker has written the consumer's acks up to `seq` to its store (bounded)."""
    deadline = time.monotonic() + timeout_s
    while (found := _stored_ack_floor(store, durable)) is None or found < seq:
        assert time.monotonic() < deadline, f"ack floor on disk {found}, not {seq}"
        await asyncio.sleep(0.02)


async def test_kill9_loses_no_acknowledged_event_and_consumers_resume_from_ack_floor(
    tmp_path: Path,
) -> None:
    broker = Broker(store=tmp_path / "store")
    broker.start()
    try:
        settings = BusSettings(nats_url=broker.url, prefix="crash", ack_wait_s=2.0, max_deliver=5)
        topology = Topology(settings.prefix)
        nc = await connect(settings, name="writer")
        js = nc.jetstream()
        await ensure_streams(js, topology, settings)
        acked = []
        for i in range(50):
            env = envelope(
                OperationAdmitted(tool="t", arguments={"i": i}, tenant_id="t", user_id="u"),
                session_id=f"s{i % 5}",
                operation_id=f"op{i}",
            )
            ack = await append(
                js, OPERATIONS, topology.operation_subject(f"s{i % 5}", f"op{i}"), env
            )
            acked.append(ack.seq)

        # A durable consumer handles (and acks) the first 20, then the broker dies.
        handled: list[int] = []
        enough = asyncio.Event()

        async def first_pass(received: Received[OperationEvent]) -> None:
            if len(handled) >= 20:
                raise RuntimeError("stop acknowledging")
            handled.append(received.stream_seq)
            if len(handled) == 20:
                enough.set()

        spec = spec_for(
            topology, Context.OPERATIONS, durable="resume", ack_wait_s=2.0, max_deliver=50
        )
        consumer = DurableConsumer(
            js, spec, OPERATIONS, first_pass, topology=topology, source=Context.OPERATIONS, batch=1
        )
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(enough.wait(), timeout=10)
        consumer.stop()
        await task
        await nc.close()
        # The broker persists consumer ack state asynchronously; acks from the last moment
        # before a crash can be redelivered (handlers are idempotent for exactly that reason).
        # Once that flush happened, a crash must not send acknowledged work again.
        await _ack_floor_on_disk(broker.store, "resume", max(handled))

        broker.kill9()
        broker.start()

        nc = await connect(settings, name="reader")
        js = nc.jetstream()
        stream = topology.stream_name(Context.OPERATIONS)
        history = await replay(js, stream, topology.context_filter(Context.OPERATIONS), OPERATIONS)
        assert [item.stream_seq for item in history.items] == acked
        assert [item.envelope.operation_id for item in history.items] == [
            f"op{i}" for i in range(50)
        ]

        rest: list[int] = []
        all_done = asyncio.Event()

        async def second_pass(received: Received[OperationEvent]) -> None:
            rest.append(received.stream_seq)
            if len(set(handled) | set(rest)) == 50:
                all_done.set()

        consumer = DurableConsumer(
            js, spec, OPERATIONS, second_pass, topology=topology, source=Context.OPERATIONS
        )
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(all_done.wait(), timeout=15)
        consumer.stop()
        await task
        # Resumed from the ack floor: nothing acknowledged before the crash came back.
        assert not set(handled) & set(rest)
        assert sorted(set(handled) | set(rest)) == acked
        await nc.close()
    finally:
        broker.stop()


async def test_a_consumer_the_broker_lost_is_declared_again_and_consumes_within_seconds(
    tmp_path: Path,
) -> None:
    # A broker back from a kill -9 without the durable consumer (a lost or rolled-back
    # store): the running consumer notices after a few seconds of silence, not never.
    broker = Broker(store=tmp_path / "store")
    broker.start()
    try:
        settings = BusSettings(nats_url=broker.url, prefix="lost", max_deliver=5)
        topology = Topology(settings.prefix)
        nc = await connect(settings, name="lost")
        js = nc.jetstream()
        await ensure_streams(js, topology, settings)
        seen: list[str] = []
        arrived = asyncio.Event()

        async def handle(received: Received[OperationEvent]) -> None:
            seen.append(received.envelope.operation_id or "")
            arrived.set()

        spec = spec_for(
            topology, Context.OPERATIONS, durable="lost", ack_wait_s=3.0, max_deliver=5
        )
        consumer = DurableConsumer(
            js, spec, OPERATIONS, handle, topology=topology, source=Context.OPERATIONS
        )
        task = asyncio.create_task(consumer.run())
        await asyncio.wait_for(consumer.ready.wait(), timeout=10)
        stream = topology.stream_name(Context.OPERATIONS)
        await js.delete_consumer(stream, "lost")
        env = envelope(
            OperationAdmitted(tool="t", arguments={}, tenant_id="t", user_id="u"),
            session_id="s1",
            operation_id="after-loss",
        )
        await append(js, OPERATIONS, topology.operation_subject("s1", "after-loss"), env)
        started = asyncio.get_running_loop().time()
        await asyncio.wait_for(arrived.wait(), timeout=10)
        assert seen == ["after-loss"]
        assert asyncio.get_running_loop().time() - started < 8
        consumer.stop()
        await task
        await nc.close()
    finally:
        broker.stop()
