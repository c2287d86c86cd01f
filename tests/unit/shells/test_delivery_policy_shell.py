"""The delivery-policy shell (load, decide, append) on the in-memory event store."""

from __future__ import annotations

from typing import Any

import pytest
from nats.js.errors import NoStreamResponseError

from libs.bus import MemoryEventStore
from libs.clock import ManualClock, SequentialIds
from libs.config import BusSettings
from libs.domain.gate_policy import GatePolicy
from libs.events import (
    DELIVERIES,
    INTERACTION,
    ChannelConnected,
    ChannelDisconnected,
    DeliveryDecided,
    DeliveryReady,
    DeliverySent,
    DeliveryUnheard,
)
from services.delivery_policy.handlers import Gate
from services.delivery_policy.settings import SERVICE, Settings
from testkit.events import T0, envelope

from .support import offline_runtime, put

pytestmark = pytest.mark.fast


def _gate(store: MemoryEventStore, clock: ManualClock) -> Gate:
    settings = Settings(bus=BusSettings(prefix="fast"), policy=GatePolicy())
    gate = Gate(offline_runtime(SERVICE), settings, store=store, clock=clock, ids=SequentialIds())
    gate.hydrated.set()
    return gate


def _ready(delivery_id: str) -> Any:
    return envelope(
        DeliveryReady(kind="progress", text="Half way there.", short_text="Half way.",
                      source_operation_ids=()),
        session_id="s1", delivery_id=delivery_id,
    )


async def test_a_ready_delivery_is_decided_and_appended_after_it() -> None:
    store, clock = MemoryEventStore(), ManualClock(at=T0)
    gate = _gate(store, clock)
    subject = gate._rt.topology.delivery_subject("s1", "d1")
    ready = await put(store, DELIVERIES, subject, _ready("d1"))

    await gate.on_delivery(ready)

    stored = (await store.read_subject("deliveries", subject, DELIVERIES)).items
    assert stored[0].envelope.event_id == ready.envelope.event_id
    decided = [i.envelope for i in stored if isinstance(i.envelope.event, DeliveryDecided)]
    assert len(decided) == 1
    # The injected clock and id factory, not the wall clock and uuid4.
    assert decided[0].occurred_at == T0
    assert decided[0].event_id == "ev_1"
    assert decided[0].causation_id == ready.envelope.event_id
    await gate.stop()


async def test_a_concurrent_writer_makes_the_gate_reload_and_decide_again() -> None:
    store, clock = MemoryEventStore(), ManualClock(at=T0)
    gate = _gate(store, clock)
    subject = gate._rt.topology.delivery_subject("s1", "d1")
    ready = await put(store, DELIVERIES, subject, _ready("d1"))
    # The gate folded the ready event; another replica decided the same before this one
    # appends: the expected sequence (the ready event's) no longer holds.
    gate.state.apply_delivery(ready.envelope, ready.stream_seq)
    rival: Any = envelope(
        DeliveryDecided(decision="deliver_now", reason="channel_idle", mode="proactive"),
        session_id="s1", delivery_id="d1", event_id="ev_rival",
    )
    theirs = await put(store, DELIVERIES, subject, rival)

    await gate.evaluate_session("s1", cause=None)

    stored = (await store.read_subject("deliveries", subject, DELIVERIES)).items
    # Reloaded, decided again from the rival's decision and found nothing left to append.
    assert [i.envelope.event_id for i in stored] == [ready.envelope.event_id, "ev_rival"]
    assert gate.state.deliveries.last_seq["d1"] == theirs.stream_seq
    await gate.stop()


async def test_an_unheard_closing_is_decided_on_the_channel_written_before_it() -> None:
    store, clock = MemoryEventStore(), ManualClock(at=T0)
    gate = _gate(store, clock)
    topo = gate._rt.topology
    session, subject = topo.session_subject("s1"), topo.delivery_subject("s1", "d1")
    attached = await put(store, INTERACTION, session, envelope(
        ChannelConnected(channel="agent", connection_id="agent_1"), session_id="s1"))
    await gate.on_interaction(attached)
    await gate.on_delivery(await put(store, DELIVERIES, subject, _ready("d1")))
    decided = (await store.read_subject("deliveries", subject, DELIVERIES)).items[-1]
    assert isinstance(decided.envelope.event, DeliveryDecided)
    assert decided.envelope.event.decision == "deliver_now"
    # The agent's surface records the lost connection, then gives the closing back; the
    # gate hears of the closing first (the interaction consumer lags behind).
    await put(store, INTERACTION, session, envelope(
        ChannelDisconnected(channel="agent", connection_id="agent_1", reason="owner_lost"),
        session_id="s1"))
    sent = await put(store, DELIVERIES, subject, envelope(
        DeliverySent(mode="proactive", channel="agent", connection_id="agent_1"),
        session_id="s1", delivery_id="d1"))
    await gate.on_delivery(sent)
    unheard = await put(store, DELIVERIES, subject, envelope(
        DeliveryUnheard(played_ms=0, reason="not_started: agent connection lost"),
        session_id="s1", delivery_id="d1"))

    await gate.on_delivery(unheard)

    after = [i.envelope.event for i in
             (await store.read_subject("deliveries", subject, DELIVERIES)).items]
    last = after[-1]
    # Not handed to the dead connection again: it waits for the next connection or turn.
    assert isinstance(last, DeliveryDecided)
    assert last.decision == "attach_next_turn", last
    assert last.reason.startswith("channel_disconnected")
    await gate.stop()


async def test_a_ready_closing_is_decided_on_the_channel_written_before_it() -> None:
    store, clock = MemoryEventStore(), ManualClock(at=T0)
    gate = _gate(store, clock)
    topo = gate._rt.topology
    session, subject = topo.session_subject("s1"), topo.delivery_subject("s1", "d2")
    attached = await put(store, INTERACTION, session, envelope(
        ChannelConnected(channel="agent", connection_id="agent_1"), session_id="s1"))
    await gate.on_interaction(attached)
    # Written before the closing, but not yet delivered to the gate's interaction consumer.
    await put(store, INTERACTION, session, envelope(
        ChannelDisconnected(channel="agent", connection_id="agent_1"), session_id="s1"))

    await gate.on_delivery(await put(store, DELIVERIES, subject, _ready("d2")))

    [decided] = [i.envelope.event for i in
                 (await store.read_subject("deliveries", subject, DELIVERIES)).items[1:]]
    assert isinstance(decided, DeliveryDecided)
    assert decided.decision == "attach_next_turn", decided
    await gate.stop()


class _UnavailableOnce(MemoryEventStore):
    """Once armed, refuses one append as a broker between leaders would, then stores."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.refused = 0

    async def append(self, *args: Any, **kwargs: Any) -> Any:
        if self.armed and self.refused == 0:
            self.refused += 1
            raise NoStreamResponseError
        return await super().append(*args, **kwargs)


async def test_a_ready_delivery_run_again_after_an_unavailable_broker_is_still_decided() -> None:
    # The consumer runs a handler again in place while the broker is unavailable; by then the
    # ready event is folded, and the second run must still decide (it once acked undecided).
    store, clock = _UnavailableOnce(), ManualClock(at=T0)
    gate = _gate(store, clock)
    subject = gate._rt.topology.delivery_subject("s1", "d1")
    ready = await put(store, DELIVERIES, subject, _ready("d1"))
    store.armed = True

    with pytest.raises(NoStreamResponseError):
        await gate.on_delivery(ready)
    await gate.on_delivery(ready)

    stored = (await store.read_subject("deliveries", subject, DELIVERIES)).items
    decided = [i for i in stored if isinstance(i.envelope.event, DeliveryDecided)]
    assert store.refused == 1
    assert len(decided) == 1
    # Decided once: a third delivery of the same event decides nothing more.
    await gate.on_delivery(ready)
    again = (await store.read_subject("deliveries", subject, DELIVERIES)).items
    assert len(again) == len(stored)
    await gate.stop()
