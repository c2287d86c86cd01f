"""Batch and delivery events carry their kind in the subject; the real coordinator and
policy are delivered only the kinds they ask for (the coordinator no admission, the policy no
operation's ending), and still close each batch once.

The durables' own figures on the broker say what was delivered: the stream holds the
batch's settlements and drain, the policy's decisions, yet the consumers' delivered
sequence stops before them.
"""

from __future__ import annotations

from typing import Any

import pytest
from nats.js import JetStreamContext

from libs.bus import Context, Topology
from libs.domain.batch import final_delivery_id
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    ChannelConnected,
    DeliveryDecided,
    DeliveryReady,
    SpeechStarted,
    SpeechStopped,
)
from testkit.surface import eventually
from tests.component.coordination.harness import Scripted, Services, assert_one_final, new_id


async def _settled(
    js: JetStreamContext, topology: Topology, context: Context, durable: str
) -> Any:
    """The durable's info once it has nothing pending and nothing unacknowledged."""
    stream = topology.stream_name(context)

    async def probe() -> Any:
        info = await js.consumer_info(stream, durable)
        return info if info.num_pending == 0 and info.num_ack_pending == 0 else None

    return await eventually(probe, timeout_s=10)


async def test_the_coordinator_is_delivered_only_batch_opened_and_closes_once(
    scripted: Scripted, services: Services, js: JetStreamContext, topology: Topology
) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(session, batch, {"op1": {}, "op2": {}, "op3": {}})
    for op in ("op1", "op2", "op3"):
        await scripted.commit(session, batch, op)
    await eventually(lambda: _closed(scripted, session, batch))
    await assert_one_final(scripted, session, batch)

    info = await _settled(js, topology, Context.BATCHES, "batch-coordinator-batches")
    assert info.config.filter_subjects == [f"{topology.prefix}.batches.*.*.opened"]
    stream = await js.stream_info(topology.stream_name(Context.BATCHES))
    # opened and the drain (with the three members) are stored; one message was delivered.
    assert stream.state.messages == 2
    assert info.delivered.consumer_seq == 1
    assert info.delivered.stream_seq == 1 < stream.state.last_seq


@pytest.mark.parametrize("words", [True, False], ids=["batch-names-words", "earlier-batch"])
async def test_the_coordinator_words_each_member_without_being_delivered_its_admission(
    scripted: Scripted, services: Services, js: JetStreamContext, topology: Topology,
    words: bool,
) -> None:
    # From what `batch.opened` names; on a batch opened as earlier versions did (ids and
    # tools only), from each member's subject, loaded when the closing is due.
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(
        session, batch, {"alpha": {}, "beta": {"arguments": {"access": "beta-room"}}},
        words=words,
    )
    for op in ("alpha", "beta"):
        await scripted.commit(session, batch, op)
    await eventually(lambda: _closed(scripted, session, batch))
    ready = await assert_one_final(scripted, session, batch)
    assert isinstance(ready.event, DeliveryReady)
    assert ready.event.text == "All done: alpha and beta-room."

    info = await _settled(js, topology, Context.OPERATIONS, "batch-coordinator-operations")
    stored = await js.stream_info(topology.stream_name(Context.OPERATIONS))
    # Two admissions and two commits are stored; only the commits were delivered.
    assert stored.state.messages == 4
    assert info.delivered.consumer_seq == 2


async def test_the_policy_is_not_delivered_its_own_decisions_and_still_decides_the_same(
    scripted: Scripted, services: Services, js: JetStreamContext, topology: Topology
) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.interaction(session, ChannelConnected(channel="voice", connection_id="c1"))
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.commit(session, batch, "op1")
    delivery = final_delivery_id(batch)

    async def waiting() -> list[Any] | None:
        events = await scripted.delivery_events(session)
        return events if any(isinstance(e.event, DeliveryDecided) for e in events) else None

    events = await eventually(waiting, timeout_s=10)
    assert [type(e.event) for e in events] == [DeliveryReady, DeliveryDecided]
    info = await _settled(js, topology, Context.DELIVERIES, "delivery-policy-deliveries")
    assert f"{topology.prefix}.deliveries.*.*.decided" not in info.config.filter_subjects
    assert f"{topology.prefix}.deliveries.*.*.ready" in info.config.filter_subjects
    # The decision is stored after the ready event, yet only the ready was delivered.
    last = (await js.stream_info(topology.stream_name(Context.DELIVERIES))).state.last_seq
    assert info.delivered.consumer_seq == 1
    assert info.delivered.stream_seq < last
    # Of op1's events only the admission reached the policy: how it ended comes with the
    # closing, which the gate judges by who asked, on which subject, and any undo.
    ops = await _settled(js, topology, Context.OPERATIONS, "delivery-policy-operations")
    stored = await js.stream_info(topology.stream_name(Context.OPERATIONS))
    assert stored.state.messages >= 2
    assert ops.delivered.consumer_seq == 1

    # It goes on from its own folded decision: quiet window, then said now.
    await scripted.interaction(session, SpeechStopped(stream_ms=900))

    async def said_now() -> list[str] | None:
        got = [d for d, _ in await scripted.decisions(session, delivery)]
        return got if "deliver_now" in got else None

    assert await eventually(said_now, timeout_s=10) == [
        "wait_for_quiet", "wait_for_quiet", "deliver_now"
    ]
    await scripted.say(session, delivery)
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.SPOKEN
    # Delivered: the ready, the sent and the spoken; never one of the three decisions.
    info = await _settled(js, topology, Context.DELIVERIES, "delivery-policy-deliveries")
    assert info.delivered.consumer_seq == 3


async def _closed(scripted: Scripted, session: str, batch: str) -> bool | None:
    events = [e for e in await scripted.batch_events(session) if e.batch_id == batch]
    return True if any(type(e.event).__name__ == "BatchDrained" for e in events) else None
