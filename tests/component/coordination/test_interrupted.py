"""On the real broker: a batch whose turn died between `batch.opened` and the admission of a
member closes once, the silent member rejected as interrupted, and a late admission of that
member is refused."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from nats.js import JetStreamContext

from libs.bus import ConcurrencyConflict, Topology
from libs.events import (
    OPERATIONS,
    DeliveryReady,
    Envelope,
    OperationAdmitted,
    OperationCommitted,
    OperationRejected,
)
from testkit.surface import eventually
from testkit.writer import append
from tests.component.coordination.harness import Scripted, Services, assert_one_final, new_id

QUICK = {"HOLDLINE_INTERRUPTED_GRACE_S": "1", "HOLDLINE_INTERRUPTED_SWEEP_S": "0.2"}


@pytest.mark.parametrize("services", [QUICK], indirect=True)
async def test_a_batch_whose_turn_died_before_an_admission_closes_once_and_refuses_it_late(
    scripted: Scripted, services: Services, js: JetStreamContext, topology: Topology
) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(session, batch, {"op1": {}}, silent=("op2",), tool="book_table")
    await scripted.commit(session, batch, "op1")
    ready = await _closing(scripted, session, batch)
    assert "nothing was done" in ready.text, ready.text
    silent = await scripted.operation_events(session, "op2")
    assert [type(e.event) for e in silent] == [OperationRejected]
    rejected = silent[0].event
    assert isinstance(rejected, OperationRejected)
    assert (rejected.reason, rejected.tool) == ("interrupted", "book_table")
    assert silent[0].batch_id == batch

    # The admission arriving late is refused: the member's first event is taken.
    late = Envelope(
        event_id=new_id("ev"), occurred_at=datetime.now(UTC), session_id=session,
        operation_id="op2", batch_id=batch,
        event=OperationAdmitted(
            tool="book_table", arguments={}, tenant_id=scripted.tenant_id,
            user_id=scripted.user_id, owner="session", priority="normal",
        ),
    )
    with pytest.raises(ConcurrencyConflict):
        await append(js, OPERATIONS, topology.operation_subject(session, "op2"), late,
                     expected_last_subject_seq=0)
    # Further sweeps leave the closed batch alone.
    await asyncio.sleep(1.0)
    await assert_one_final(scripted, session, batch)
    assert len(await scripted.operation_events(session, "op2")) == 1


@pytest.mark.parametrize("services", [QUICK], indirect=True)
async def test_a_member_admitted_but_running_past_the_grace_is_never_rejected(
    scripted: Scripted, services: Services
) -> None:
    # The coordinator is not delivered admissions: a long run with nothing else delivered
    # looks silent, and the guard (its admission is there) refuses the rejection.
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(session, batch, {"op1": {}}, tool="book_table")
    await asyncio.sleep(2.0)  # the 1 s grace, and several 0.2 s sweeps, go by
    events = await scripted.operation_events(session, "op1")
    assert [type(e.event) for e in events] == [OperationAdmitted]
    await scripted.commit(session, batch, "op1")
    ready = await _closing(scripted, session, batch)
    assert "nothing was done" not in ready.text, ready.text
    assert [type(e.event) for e in await scripted.operation_events(session, "op1")] == [
        OperationAdmitted, OperationCommitted
    ]


async def _closing(scripted: Scripted, session: str, batch: str) -> DeliveryReady:
    """The batch's one closing, once it exists."""

    async def closed() -> list[Envelope[object]]:
        return [e for e in await scripted.finals(session) if e.batch_id == batch]

    await eventually(closed, timeout_s=15)
    ready = await assert_one_final(scripted, session, batch)
    assert isinstance(ready.event, DeliveryReady)
    return ready.event
