"""The batch coordinator's shell (load, decide, claim, append) on the in-memory event store."""

from __future__ import annotations

from typing import Any

import pytest

from demo.models import MockModel
from libs.bus import MemoryEventStore
from libs.clock import ManualClock
from libs.config import BusSettings
from libs.domain.batch import claim_key, final_delivery_id, final_delivery_key
from libs.events import (
    BATCHES,
    DELIVERIES,
    OPERATIONS,
    BatchDrained,
    BatchOpened,
    DeliveryReady,
    OperationAdmitted,
    OperationCommitted,
    OperationStarted,
    SettledMember,
)
from services.batch_coordinator.handlers import Coordinator
from services.batch_coordinator.settings import SERVICE, Settings
from testkit.events import T0, envelope

from .support import offline_runtime, put

pytestmark = pytest.mark.fast

MEMBERS = ("op1", "op2")


def _coordinator(store: MemoryEventStore) -> Coordinator:
    settings = Settings(bus=BusSettings(prefix="fast"))
    coordinator = Coordinator(
        offline_runtime(SERVICE), settings, MockModel(), store=store, clock=ManualClock(at=T0)
    )
    coordinator.hydrated.set()
    return coordinator


def _op(event: Any, op: str) -> Any:
    return envelope(event, session_id="s1", operation_id=op, batch_id="b1", intent_key=f"ik-{op}")


async def _open_batch(store: MemoryEventStore, coordinator: Coordinator) -> None:
    topo = coordinator._rt.topology
    for op in MEMBERS:
        admitted = _op(
            OperationAdmitted(tool="provision_access", arguments={"access": op}, tenant_id="t",
                              user_id="u"),
            op,
        )
        await coordinator.on_operation(
            await put(store, OPERATIONS, topo.operation_subject("s1", op), admitted)
        )
    opened: Any = envelope(BatchOpened(operation_ids=MEMBERS), session_id="s1", batch_id="b1")
    await coordinator.on_batch(await put(store, BATCHES, topo.batch_subject("s1", "b1"), opened))


async def _commit(store: MemoryEventStore, coordinator: Coordinator, op: str) -> Any:
    topo = coordinator._rt.topology
    committed = await put(
        store, OPERATIONS, topo.operation_subject("s1", op), _op(OperationCommitted(result={}), op)
    )
    await coordinator.on_operation(committed)
    return committed


async def _batch_types(store: MemoryEventStore, subject: str) -> list[type]:
    return [type(i.envelope.event) for i in (await store.read_subject("b", subject, BATCHES)).items]


async def test_a_batch_closes_once_with_one_delivery() -> None:
    store = MemoryEventStore()
    coordinator = _coordinator(store)
    topo = coordinator._rt.topology
    await _open_batch(store, coordinator)
    batch_subject = topo.batch_subject("s1", "b1")
    delivery_subject = topo.delivery_subject("s1", final_delivery_id("b1"))

    await _commit(store, coordinator, "op1")
    # One member still running: known terminal, but nothing written and no closing yet.
    assert coordinator.terminal["op1"] == "committed"
    assert await _batch_types(store, batch_subject) == [BatchOpened]
    assert (await store.read_subject("d", delivery_subject, DELIVERIES)).items == []

    last = await _commit(store, coordinator, "op2")
    # A redelivered terminal event (a callback twice) must not close the batch again.
    await coordinator.on_operation(last)

    assert await _batch_types(store, batch_subject) == [BatchOpened, BatchDrained]
    drained = (await store.read_subject("b", batch_subject, BATCHES)).items[-1].envelope.event
    assert isinstance(drained, BatchDrained)
    # Every member once, in the order they committed.
    assert drained.settled == (
        SettledMember(operation_id="op1", status="committed"),
        SettledMember(operation_id="op2", status="committed"),
    )
    assert (drained.committed, drained.failed) == (2, 0)
    ready = (await store.read_subject("d", delivery_subject, DELIVERIES)).items
    assert len(ready) == 1
    assert isinstance(ready[0].envelope.event, DeliveryReady)
    assert ready[0].envelope.event.source_operation_ids == MEMBERS
    assert ready[0].envelope.occurred_at == T0
    claimed = await store.read_claim("deliveries", claim_key(final_delivery_key("b1")))
    assert claimed == final_delivery_id("b1").encode()


async def test_a_closing_claimed_by_another_id_is_delivered_under_that_id() -> None:
    store = MemoryEventStore()
    coordinator = _coordinator(store)
    topo = coordinator._rt.topology
    # An older version claimed the closing under another delivery id.
    await store.claim_once("deliveries", claim_key(final_delivery_key("b1")), b"dl_older")
    await _open_batch(store, coordinator)
    for op in MEMBERS:
        await _commit(store, coordinator, op)

    theirs = await store.read_subject("d", topo.delivery_subject("s1", "dl_older"), DELIVERIES)
    ours = await store.read_subject(
        "d", topo.delivery_subject("s1", final_delivery_id("b1")), DELIVERIES
    )
    assert [type(i.envelope.event) for i in theirs.items] == [DeliveryReady]
    assert ours.items == []


async def test_a_member_whose_admission_was_not_folded_is_worded_from_its_subject() -> None:
    # The consumer delivered only the commits (the admissions were appended but never
    # folded here): the closing loads each operation instead of naming "the request".
    store = MemoryEventStore()
    coordinator = _coordinator(store)
    topo = coordinator._rt.topology
    for op in MEMBERS:
        subject = topo.operation_subject("s1", op)
        admitted = OperationAdmitted(
            tool="provision_access", arguments={"access": f"{op}-repo"}, tenant_id="t",
            user_id="u",
        )
        await put(store, OPERATIONS, subject, _op(admitted, op))
        await put(store, OPERATIONS, subject, _op(OperationStarted(worker_id="w", attempt=1), op))
    opened: Any = envelope(BatchOpened(operation_ids=MEMBERS), session_id="s1", batch_id="b1")
    await coordinator.on_batch(await put(store, BATCHES, topo.batch_subject("s1", "b1"), opened))
    for op in MEMBERS:
        await _commit(store, coordinator, op)
        assert not coordinator.members.states[op].opened

    delivery_subject = topo.delivery_subject("s1", final_delivery_id("b1"))
    [ready] = (await store.read_subject("d", delivery_subject, DELIVERIES)).items
    assert isinstance(ready.envelope.event, DeliveryReady)
    assert ready.envelope.event.text == "All done: op1-repo and op2-repo."
