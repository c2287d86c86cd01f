"""A durable consumer takes its deliveries where the client's parser reads them
(`libs/bus/pull.py`, `BusClient.deliver_directly`), on the broker: per-session order kept,
other sessions not held up, nothing through nats-py's subscription queue, and the messages
in hand handed back when abandoned. A connection in the "plain" bus mode (nats-py's own
client) is served through nats-py's fetch instead: tests/component/bus/test_bus_plain.py."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js import JetStreamContext

from libs.bus import Context, DurableConsumer, Received, Topology, spec_for
from libs.events import OPERATIONS, OperationAdmitted, OperationEvent
from testkit.events import envelope
from testkit.surface import eventually
from testkit.writer import append


def _admitted(session: str, op: str) -> Any:
    return envelope(
        OperationAdmitted(tool="t", arguments={"n": op}, tenant_id="t", user_id="u"),
        session_id=session,
        operation_id=op,
        intent_key=f"ik-{op}",
        batch_id="b1",
    )


def _consumer(
    js: JetStreamContext, topology: Topology, durable: str, handle: Any
) -> DurableConsumer[OperationEvent]:
    return DurableConsumer(
        js,
        spec_for(topology, Context.OPERATIONS, durable=durable, ack_wait_s=2.0, max_deliver=5),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
    )


async def _put(js: JetStreamContext, topology: Topology, session: str, op: str) -> None:
    await append(js, OPERATIONS, topology.operation_subject(session, op), _admitted(session, op))


async def test_a_session_waits_its_turn_while_others_pass_and_no_queue_is_used(
    js: JetStreamContext, topology: Topology
) -> None:
    queued: list[int] = []
    before = set(js._nc._subs)
    release = asyncio.Event()
    order: list[str] = []
    fast_done = asyncio.Event()

    async def handle(received: Received[OperationEvent]) -> None:
        op = str(received.envelope.operation_id)
        if op == "slow0":
            await release.wait()
        order.append(op)
        if op == "fast2":
            fast_done.set()

    consumer = _consumer(js, topology, "lean", handle)
    task = asyncio.create_task(consumer.run())
    try:
        await consumer.ready.wait()
        # The consumer's own subscriptions: nats-py would queue a delivery there.
        made = [sub for sid, sub in js._nc._subs.items() if sid not in before]
        assert made
        for sub in made:
            sub._pending_queue.put_nowait = lambda msg, sid=sub._id: queued.append(sid)
        for i in range(3):
            await _put(js, topology, "slow", f"slow{i}")
        for i in range(3):
            await _put(js, topology, "fast", f"fast{i}")
        await asyncio.wait_for(fast_done.wait(), 10)
        # The slow session's first event still runs; its others wait behind it.
        assert order == ["fast0", "fast1", "fast2"]
        release.set()

        async def all_six() -> bool:
            return len(order) == 6

        await eventually(all_six, timeout_s=2.0, every_s=0.02)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
    assert order[3:] == ["slow0", "slow1", "slow2"]
    assert queued == []


async def test_abandoned_messages_in_hand_are_counted_and_handed_back_at_once(
    js: JetStreamContext, topology: Topology
) -> None:
    started = asyncio.Event()

    async def stuck(received: Received[OperationEvent]) -> None:
        started.set()
        await asyncio.Event().wait()

    first = _consumer(js, topology, "handback", stuck)
    task = asyncio.create_task(first.run())
    await first.ready.wait()
    for i in range(3):
        await _put(js, topology, "s1", f"op{i}")
    await asyncio.wait_for(started.wait(), 10)

    async def three_in_hand() -> bool:
        return first._in_hand == 3

    await eventually(three_in_hand, timeout_s=2.0, every_s=0.02)
    first.stop()
    assert await first.abandon() == 3
    await asyncio.wait_for(task, 10)

    again: list[tuple[str, int]] = []

    async def record(received: Received[OperationEvent]) -> None:
        again.append((str(received.envelope.operation_id), received.num_delivered))

    second = _consumer(js, topology, "handback", record)
    task = asyncio.create_task(second.run())
    try:

        async def redelivered() -> bool:
            return len(again) == 3

        # Handed back, not waiting out the 2 s ack wait.
        await eventually(redelivered, timeout_s=1.0, every_s=0.02)
    finally:
        second.stop()
        await asyncio.wait_for(task, 10)
    # Redelivery follows the hand-backs, not the stream's order.
    assert sorted(op for op, _ in again) == ["op0", "op1", "op2"]
    assert all(delivered >= 2 for _, delivered in again), again
