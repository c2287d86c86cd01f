"""Admission's follow-ups on the in-memory event store: a cancellation request is recorded
on the control stream and its effect decided on the operation, again after a lost race."""

from __future__ import annotations

from typing import Any

import pytest

from libs.admission import Admission, LoadView, TurnContext
from libs.bus import ConcurrencyConflict, Context, MemoryEventStore, Topology
from libs.clock import ManualClock, SequentialIds
from libs.events import (
    CONTROL,
    OPERATIONS,
    Envelope,
    OperationAdmitted,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCommitted,
    OperationStarted,
)
from libs.tools import default_registry
from testkit.events import T0, envelope

pytestmark = pytest.mark.fast

TOPOLOGY = Topology("fast")
CTX = TurnContext(session_id="s1", turn_id="t1", tenant_id="t", user_id="u", agent="main")


class _LateStore(MemoryEventStore):
    """Another writer lands on the operation just before this process's first append."""

    races = 0

    async def append(self, codec: Any, subject: str, env: Envelope[Any], **kw: Any) -> Any:
        if self.races and kw.get("expected_last_subject_seq") is not None:
            self.races -= 1
            await super().append(
                OPERATIONS, subject, _op(OperationStarted(attempt=1, worker_id="w"))
            )
            raise ConcurrencyConflict(subject, kw["expected_last_subject_seq"])
        return await super().append(codec, subject, env, **kw)


def _op(event: Any) -> Any:
    return envelope(event, session_id="s1", operation_id="op1", batch_id="b1", intent_key="ik1")


def _admission(store: MemoryEventStore) -> Admission:
    # The intents bucket is only for admitting; follow-ups on an existing operation never
    # claim one.
    return Admission(
        store, TOPOLOGY, default_registry(), LoadView(), None,  # type: ignore[arg-type]
        clock=ManualClock(at=T0), ids=SequentialIds(),
    )


async def _admitted(store: MemoryEventStore, tool: str) -> str:
    subject = TOPOLOGY.operation_subject("s1", "op1")
    admitted = OperationAdmitted(tool=tool, arguments={}, tenant_id="t", user_id="u")
    await store.append(OPERATIONS, subject, _op(admitted), expected_last_subject_seq=0)
    return subject


async def test_a_cancel_is_recorded_and_requested_after_a_lost_race() -> None:
    store = _LateStore()
    subject = await _admitted(store, "book_table")
    store.races = 1
    answer = await _admission(store).request_cancel(CTX, "op1", reason="changed my mind")
    assert answer.status == "cancel_requested"
    control = await store.read_subject(
        TOPOLOGY.stream_name(Context.CONTROL), TOPOLOGY.control_subject("s1"), CONTROL
    )
    assert len(control.items) == 1
    request_id = control.items[0].envelope.event_id
    ops = await store.read_subject("memory", subject, OPERATIONS)
    kinds = [type(i.envelope.event) for i in ops.items]
    # Decided again on the state the racing writer left: appended after its event.
    assert kinds == [OperationAdmitted, OperationStarted, OperationCancelRequested]
    assert ops.items[-1].envelope.causation_id == request_id


async def test_a_committed_operation_refuses_and_offers_its_compensation() -> None:
    store = MemoryEventStore()
    subject = await _admitted(store, "provision_access")
    await store.append(OPERATIONS, subject, _op(OperationStarted(attempt=1, worker_id="w")))
    await store.append(OPERATIONS, subject, _op(OperationCommitted(result={})))
    answer = await _admission(store).request_cancel(CTX, "op1", reason="no")
    assert answer.status == "committed"
    assert answer.reason == "not_cancellable"
    last = (await store.read_subject("memory", subject, OPERATIONS)).items[-1].envelope.event
    assert isinstance(last, OperationCancelRefused)
    assert last.compensating_tool == "revoke_access"
    # An operation with no events is said to be unknown, nothing appended.
    unknown = await _admission(store).request_cancel(CTX, "op-none", reason="no")
    assert unknown.reason == "unknown_operation"
