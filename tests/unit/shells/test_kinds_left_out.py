"""The batch and delivery kinds the coordinator and the policy do not ask the broker for.

Their consumers take only some kinds (`Coordinator.CONSUMED_BATCH_EVENTS`,
`CONSUMED_DELIVERY_EVENTS`); what they leave out they must either have appended themselves
(and folded as they appended it) or be able to miss without deciding differently. Here the
shells are handed only what the broker would deliver them.
"""

from __future__ import annotations

import typing
from dataclasses import replace
from typing import Any

import pytest

from demo.models import MockModel
from devtools.declared import declared
from libs.bus import Context, MemoryEventStore
from libs.clock import ManualClock, SequentialIds
from libs.config import BusSettings
from libs.domain import batch as batch_domain
from libs.domain import delivery as delivery_domain
from libs.domain.batch import BatchState, CloseBatch, final_delivery_id
from libs.domain.delivery import OPEN, DeliveryState, DeliveryStatus
from libs.domain.gate_policy import GatePolicy
from libs.events import (
    BATCHES,
    DELIVERIES,
    OPERATIONS,
    BatchDrained,
    BatchEvent,
    BatchMemberSettled,
    BatchOpened,
    DeliveryDecided,
    DeliveryEvent,
    DeliveryReady,
    DeliveryRequeued,
    DeliverySuperseded,
    OperationAdmitted,
    OperationCommitted,
)
from services.batch_coordinator import settings as coordinator_settings
from services.batch_coordinator.handlers import Coordinator
from services.delivery_policy import settings as policy_settings
from services.delivery_policy.domain import CONSUMED_DELIVERY_EVENTS
from services.delivery_policy.handlers import Gate
from testkit.events import T0, envelope

from .support import offline_runtime, put

pytestmark = pytest.mark.fast

MEMBERS = ("op1", "op2")


def _coordinator(store: MemoryEventStore) -> Coordinator:
    settings = coordinator_settings.Settings(bus=BusSettings(prefix="fast"))
    coordinator = Coordinator(
        offline_runtime(coordinator_settings.SERVICE), settings, MockModel(), store=store,
        clock=ManualClock(at=T0),
    )
    coordinator.hydrated.set()
    return coordinator


def _op(event: Any, op: str) -> Any:
    return envelope(event, session_id="s1", operation_id=op, batch_id="b1", intent_key=f"ik-{op}")


def test_the_coordinator_leaves_out_exactly_the_batch_kinds_it_decides_itself() -> None:
    state = BatchState(batch_id="b1", session_id="s1", members=("op1",))
    own = {type(e) for e in batch_domain.decide(state, CloseBatch("d1", {"op1": "committed"}))}
    assert own == {BatchDrained}
    left_out = set(typing.get_args(BatchEvent)) - set(Coordinator.CONSUMED_BATCH_EVENTS)
    # `batch.member_settled` stays readable for batches closed by earlier versions; nothing
    # writes it any more (no role of the contract sends it).
    assert left_out == own | {BatchMemberSettled}
    every = set(typing.get_args(BatchEvent))
    senders = [p for p in declared().publications if p.context is Context.BATCHES]
    assert senders
    assert not any(
        BatchMemberSettled in (set(r.only) if r.only else every - set(r.exclude))
        for r in senders
    )
    # Everyone else (the surface's admission) writes only what the coordinator takes.
    surface = next(p for p in declared().publications
                   if p.service == "interaction-surface" and p.context is Context.BATCHES)
    assert set(surface.only) == set(Coordinator.CONSUMED_BATCH_EVENTS) == {BatchOpened}


async def test_a_coordinator_that_missed_another_copys_closing_reloads_and_closes_nothing(
) -> None:
    """Two copies of one partition (a handoff): the one that closed the batch is not heard
    by the other, whose next append conflicts and reloads the batch through its wildcard."""
    store = MemoryEventStore()
    first, second = _coordinator(store), _coordinator(store)
    topo = first._rt.topology
    for op in MEMBERS:
        admitted = await put(
            store, OPERATIONS, topo.operation_subject("s1", op),
            _op(OperationAdmitted(tool="provision_access", arguments={"access": op},
                                  tenant_id="t", user_id="u"), op),
        )
        for coordinator in (first, second):
            await coordinator.on_operation(admitted)
    opened: Any = await put(store, BATCHES, topo.batch_subject("s1", "b1"), envelope(
        BatchOpened(operation_ids=MEMBERS), session_id="s1", batch_id="b1"
    ))
    for coordinator in (first, second):
        await coordinator.on_batch(opened)
    commits = [
        await put(store, OPERATIONS, topo.operation_subject("s1", op),
                  _op(OperationCommitted(result={}), op))
        for op in MEMBERS
    ]
    for committed in commits:
        await first.on_operation(committed)
    # The second copy is handed the same commits (its own consumer's deliveries) with only
    # batch.opened folded of the batch: it sees the batch as due and tries to close it.
    stale = second.batches.get("b1")
    assert stale is not None
    assert not stale.closed
    for committed in commits:
        await second.on_operation(committed)

    batch = await store.read_subject("b", topo.batch_subject("s1", "b1"), BATCHES)
    assert [type(i.envelope.event).__name__ for i in batch.items] == [
        "BatchOpened", "BatchDrained"
    ]
    ready = await store.read_subject(
        "d", topo.delivery_subject("s1", final_delivery_id("b1")), DELIVERIES
    )
    assert len(ready.items) == 1
    reloaded = second.batches.get("b1")
    assert reloaded is not None
    assert reloaded.closed
    assert second.batches.last_seq["b1"] == batch.last_seq


def _gate(store: MemoryEventStore) -> Gate:
    settings = policy_settings.Settings(bus=BusSettings(prefix="fast"), policy=GatePolicy())
    gate = Gate(
        offline_runtime(policy_settings.SERVICE), settings, store=store,
        clock=ManualClock(at=T0), ids=SequentialIds(),
    )
    gate.hydrated.set()
    return gate


def _ready(delivery_id: str) -> Any:
    return envelope(
        DeliveryReady(kind="progress", text="Half way there.", short_text="Half way.",
                      source_operation_ids=()),
        session_id="s1", delivery_id=delivery_id,
    )


def test_the_policy_leaves_out_only_its_decisions_and_requeues() -> None:
    left_out = set(typing.get_args(DeliveryEvent)) - set(CONSUMED_DELIVERY_EVENTS)
    assert left_out == {DeliveryDecided, DeliveryRequeued}
    # A decision someone else records (a turn refusing a stale update) moves no status.
    base = DeliveryState(
        delivery_id="d1", session_id="s1", batch_id=None, status=DeliveryStatus.PENDING,
        kind="final", priority="normal", text="t", short_text="t",
    )
    for status in OPEN:
        for decision in ("supersede", "suppress"):
            decided: Any = envelope(DeliveryDecided(decision=decision, reason="stale"),
                               session_id="s1", delivery_id="d1")
            after = delivery_domain.evolve(replace(base, status=status), decided)
            assert after.status is status
            assert after.open


async def test_the_policy_folds_its_own_decision_without_hearing_it() -> None:
    store = MemoryEventStore()
    gate = _gate(store)
    subject = gate._rt.topology.delivery_subject("s1", "d1")
    await gate.on_delivery(await put(store, DELIVERIES, subject, _ready("d1")))

    stored = (await store.read_subject("deliveries", subject, DELIVERIES)).items
    decided = [i for i in stored if isinstance(i.envelope.event, DeliveryDecided)]
    assert len(decided) == 1
    state = gate.state.deliveries.get("d1")
    assert state is not None
    assert state.decision == decided[0].envelope.event.decision  # type: ignore[union-attr]
    assert gate.state.deliveries.last_seq["d1"] == decided[0].stream_seq
    # Looking again appends nothing: the fold already holds the decision.
    await gate.evaluate_session("s1", cause=None)
    assert len((await store.read_subject("deliveries", subject, DELIVERIES)).items) == 2
    await gate.stop()


async def test_a_refusal_the_surface_records_settles_the_policy_by_its_closing_event() -> None:
    store = MemoryEventStore()
    gate = _gate(store)
    subject = gate._rt.topology.delivery_subject("s1", "d1")
    await gate.on_delivery(await put(store, DELIVERIES, subject, _ready("d1")))
    # The surface refuses the update: its decision (not delivered to the policy), then the
    # closing event (delivered).
    await put(store, DELIVERIES, subject, envelope(
        DeliveryDecided(decision="supersede", reason="superseded_by_newer_intent"),
        session_id="s1", delivery_id="d1",
    ))
    superseded: Any = await put(store, DELIVERIES, subject, envelope(
        DeliverySuperseded(by_delivery_id="d2", reason="superseded_by_newer_intent"),
        session_id="s1", delivery_id="d1",
    ))
    await gate.on_delivery(superseded)

    state = gate.state.deliveries.get("d1")
    assert state is not None
    assert state.status is DeliveryStatus.SUPERSEDED
    assert gate.state.open_deliveries("s1") == []
    assert gate.state.deliveries.last_seq["d1"] == superseded.stream_seq
    # Nothing more was appended by the policy.
    assert len((await store.read_subject("deliveries", subject, DELIVERIES)).items) == 4
    await gate.stop()
