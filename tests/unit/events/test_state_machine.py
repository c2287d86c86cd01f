"""Random event sequences (with duplicates and redeliveries) against the pure projections."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from libs.domain import TERMINAL, IllegalTransition, OperationState, OpStatus, Projection, operation
from libs.events import (
    AttemptRecord,
    OperationAdmitted,
    OperationAttempted,
    OperationCancelled,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCommitted,
    OperationEvent,
    OperationFailedFinal,
    OperationProgress,
    OperationRetryScheduled,
    OperationStarted,
    OperationUnknown,
)
from testkit.events import T0, envelope

EVENTS: list[Any] = [
    OperationAdmitted(tool="book_table", arguments={}, tenant_id="t", user_id="u"),
    OperationAdmitted(
        tool="transfer_money", arguments={}, tenant_id="t", user_id="u", idempotent=False
    ),
    OperationStarted(worker_id="w", attempt=1),
    OperationAttempted(attempt=1, outcome="timeout_after_send"),
    OperationProgress(message="still working"),
    OperationRetryScheduled(attempt=1, reason="503", retry_at=T0),
    OperationUnknown(reason="timeout after send"),
    OperationCommitted(result={"ok": True}),
    OperationCommitted(result={"ok": True}, attempt=AttemptRecord(attempt=1, http_status=201)),
    OperationFailedFinal(reason="business_error"),
    OperationCancelRequested(requested_by="user", reason="changed mind"),
    OperationCancelled(),
    OperationCancelRefused(reason="already committed"),
]


def _key(env: Any) -> str:
    return str(env.operation_id)


class OperationMachine(RuleBasedStateMachine):
    """Drives one operation's stream with random events, duplicates and redeliveries."""

    def __init__(self) -> None:
        super().__init__()
        self.projection: Projection[OperationState, OperationEvent] = Projection(
            operation.evolve, _key
        )
        self.log: list[tuple[int, Any]] = []
        self.seq = 0
        self.history: list[OpStatus] = []
        self.ever_committed = False

    @rule(event=st.sampled_from(EVENTS))
    def append(self, event: Any) -> None:
        self.seq += 1
        env = envelope(event, session_id="s", operation_id="op")
        before = self.projection.get("op")
        refused_before = len(self.projection.refused)
        after = self.projection.apply(env, self.seq)
        self.log.append((self.seq, env))
        if len(self.projection.refused) > refused_before:
            # A refused event leaves the state exactly as it was.
            assert after == before
        elif after is not None:
            if after.status is OpStatus.COMMITTED:
                self.ever_committed = True
            self.history.append(after.status)

    @rule(data=st.data())
    def redeliver(self, data: st.DataObject) -> None:
        if not self.log:
            return
        seq, env = data.draw(st.sampled_from(self.log))
        before = self.projection.get("op")
        assert self.projection.apply(env, seq) == before

    @invariant()
    def terminal_states_never_change(self) -> None:
        for i, status in enumerate(self.history):
            if status in TERMINAL:
                assert all(later == status for later in self.history[i:])

    @invariant()
    def never_cancelled_after_commit(self) -> None:
        state = self.projection.get("op")
        if self.ever_committed:
            assert state is not None
            assert state.status is OpStatus.COMMITTED

    @invariant()
    def non_idempotent_never_restarts_unreconciled(self) -> None:
        state = self.projection.get("op")
        if state is not None and not state.idempotent:
            for prev, nxt in zip(self.history, self.history[1:], strict=False):
                assert not (prev is OpStatus.UNKNOWN and nxt is OpStatus.FAILED_RETRYABLE)


OperationMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=30, deadline=None
)
TestOperationMachine = OperationMachine.TestCase


def test_illegal_transitions_raise_a_typed_error() -> None:
    committed = envelope(OperationCommitted(result={}), operation_id="op")
    with pytest.raises(IllegalTransition) as info:
        operation.evolve(None, committed)
    assert info.value.status is None
    assert info.value.event_type == "operation.committed"

    state = operation.evolve(None, envelope(EVENTS[1], operation_id="op"))
    state = operation.evolve(
        state, envelope(OperationStarted(worker_id="w", attempt=1), operation_id="op")
    )
    # A non-idempotent operation that may have sent its mutation cannot simply start again.
    with pytest.raises(IllegalTransition, match="unreconciled"):
        operation.evolve(
            state, envelope(OperationStarted(worker_id="w2", attempt=2), operation_id="op")
        )
    state = operation.evolve(state, envelope(OperationUnknown(reason="timeout"), operation_id="op"))
    with pytest.raises(IllegalTransition):
        operation.evolve(
            state,
            envelope(
                OperationRetryScheduled(attempt=1, reason="x", retry_at=T0), operation_id="op"
            ),
        )
    state = operation.evolve(
        state,
        envelope(OperationCommitted(result={"id": "tr_1"}, via="reconcile"), operation_id="op"),
    )
    assert state.status is OpStatus.COMMITTED
    with pytest.raises(IllegalTransition):
        operation.evolve(state, envelope(OperationCancelled(), operation_id="op"))
