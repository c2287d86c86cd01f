"""Properties of the worker's pure deciders (`services/operation_worker/domain.py`).

No broker, no provider: states, outcomes and times are drawn by Hypothesis, and every
decision is checked against the guarantees the shell relies on (a terminal operation is
left alone, retries stay inside their attempt count, deadline and budget, an UNKNOWN
operation is looked up before anything is resent, a cancel after a commit is refused with
its compensation named).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, get_args

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.domain import TERMINAL, OperationState, OpStatus, operation
from libs.events import (
    CancelOperation,
    ExecuteOperation,
    OperationAttempted,
    OperationCancelled,
    OperationCancelRefused,
    OperationCommitted,
    OperationProgress,
    OperationReconciled,
    OperationRetryScheduled,
    WorkCommand,
)
from libs.tools import AttemptResult, Lookup, ToolDeclaration
from libs.tools.executor import AttemptOutcome
from services.operation_worker.domain import RetryBudget, after_attempt
from services.operation_worker.stepping import (
    GRACE_S,
    Attempt,
    DeadLetterIt,
    Emit,
    Reconcile,
    Stop,
    Wait,
    after_attempt_budgeted,
    after_cancel,
    after_reconcile,
    attempted,
    await_completion,
    next_step,
)
from testkit.events import envelope

_T0 = datetime(2026, 1, 1, tzinfo=UTC)
_LOOKUP_STATES = ["committed", "pending", "absent", "failed", "cancelled", "error"]


class _Args:
    pass


def _declaration(**overrides: Any) -> ToolDeclaration:
    return ToolDeclaration(name="book", description="", arguments=_Args, executor="x", **overrides)


_times = st.integers(-600, 600).map(lambda s: _T0 + timedelta(seconds=s))
_optional_times = st.none() | _times


@st.composite
def _states(draw: st.DrawFn, statuses: list[OpStatus] | None = None) -> OperationState:
    return OperationState(
        operation_id="op_1",
        session_id="s_1",
        status=draw(st.sampled_from(statuses or list(OpStatus))),
        tool="book",
        arguments={},
        idempotent=draw(st.booleans()),
        attempts=draw(st.integers(0, 8)),
        awaiting_async=draw(st.booleans()),
        retry_at=draw(_optional_times),
        admitted_at=_T0 - timedelta(seconds=5),
        deadline_at=draw(_optional_times),
        last_attempt_at=draw(_optional_times),
        progress_notes=draw(st.integers(0, 2)),
        before_cancel=draw(st.none() | st.sampled_from(list(OpStatus))),
        dead_lettered=draw(st.booleans()),
    )


_commands: st.SearchStrategy[WorkCommand] = st.sampled_from(
    [ExecuteOperation(), CancelOperation(reason="user")]
)
_declarations = st.builds(
    _declaration,
    max_attempts=st.integers(1, 6),
    backoff_base_s=st.floats(0.01, 2.0),
    backoff_max_s=st.floats(0.5, 30.0),
    cancellable=st.booleans(),
    compensating_tool=st.none() | st.just("cancel_booking"),
)
_results = st.builds(
    AttemptResult,
    outcome=st.sampled_from(list(get_args(AttemptOutcome))),
    http_status=st.none() | st.sampled_from([200, 409, 429, 500, 503]),
    retry_after_s=st.none() | st.floats(0.0, 120.0),
)
_lookups = st.builds(Lookup, state=st.sampled_from(_LOOKUP_STATES))


@settings(max_examples=400, deadline=None)
@given(state=_states(), command=_commands, now=_times)
def test_a_terminal_operation_never_gets_another_step(
    state: OperationState, command: WorkCommand, now: datetime
) -> None:
    step = next_step(state, command, now)
    if state.status in TERMINAL:
        assert step == Stop()
    else:
        # Only a state that is not ours to run yet (or a cancel of one never started) stops.
        assert step != Stop() or state.status in {
            OpStatus.REQUESTED,
            OpStatus.AWAITING_CONFIRMATION,
            OpStatus.ADMITTED,
        }


@settings(max_examples=400, deadline=None)
@given(state=_states(), command=_commands, now=_times)
def test_an_attempt_is_only_planned_before_the_deadline_from_a_sendable_state(
    state: OperationState, command: WorkCommand, now: datetime
) -> None:
    step = next_step(state, command, now)
    if isinstance(step, Attempt):
        assert state.status in {OpStatus.ADMITTED, OpStatus.FAILED_RETRYABLE, OpStatus.RUNNING}
        assert state.deadline_at is None or now < state.deadline_at
        assert step.attempt == state.attempts + 1
        # A non-idempotent call found RUNNING may have been sent: never resent blindly.
        assert state.status is not OpStatus.RUNNING or (
            state.idempotent and not state.awaiting_async
        )
        # A pending retry is waited for, not brought forward.
        assert not (
            state.status is OpStatus.FAILED_RETRYABLE and state.retry_at and state.retry_at > now
        )
    if isinstance(step, Wait):
        assert step.until > now


@settings(max_examples=300, deadline=None)
@given(state=_states([OpStatus.UNKNOWN]), command=_commands, now=_times)
def test_an_unknown_operation_always_reconciles_before_a_resend(
    state: OperationState, command: WorkCommand, now: datetime
) -> None:
    step = next_step(state, command, now)
    past_grace = (
        state.deadline_at is not None
        and not state.dead_lettered
        and (now - state.deadline_at).total_seconds() > GRACE_S
    )
    assert step == (DeadLetterIt(step.reason) if isinstance(step, DeadLetterIt) else Reconcile())
    assert isinstance(step, DeadLetterIt) == past_grace


@settings(max_examples=300, deadline=None)
@given(state=_states([OpStatus.UNKNOWN]), found=_lookups, now=_times)
def test_only_an_explicit_absence_reopens_an_unknown_operation(
    state: OperationState, found: Lookup, now: datetime
) -> None:
    decision = after_reconcile(state, found, now=now, recheck_s=2.0)
    reopened = isinstance(decision, Emit) and any(
        isinstance(e, OperationReconciled) for e in decision.events
    )
    assert reopened == (found.state == "absent")
    if found.state in {"pending", "error"}:
        assert decision == Wait(now + timedelta(seconds=2.0))
    if found.state == "committed":
        assert isinstance(decision, Emit)
        assert decision.done
        assert isinstance(decision.events[0], OperationCommitted)


@settings(max_examples=500, deadline=None)
@given(
    state=_states([OpStatus.RUNNING]),
    declaration=_declarations,
    results=st.lists(_results, min_size=1, max_size=30),
    firsts=st.integers(0, 10),
    ratio=st.floats(0.0, 1.0),
    minimum=st.integers(0, 5),
    draw=st.floats(0.0, 1.0, exclude_max=True),
    now=_times,
)
def test_retries_never_exceed_attempts_deadline_or_budget(
    *,
    state: OperationState,
    declaration: ToolDeclaration,
    results: list[AttemptResult],
    firsts: int,
    ratio: float,
    minimum: int,
    draw: float,
    now: datetime,
) -> None:
    budget = RetryBudget(ratio, minimum)
    for _ in range(firsts):
        budget.record_first()
    retries = 0
    for result in results:
        decision = after_attempt_budgeted(
            state, declaration, result, now=now, draw=draw, budget=budget
        )
        for event in decision.events:
            if isinstance(event, OperationRetryScheduled):
                retries += 1
                assert event.attempt == state.attempts + 1 < declaration.max_attempts
                assert state.deadline_at is None or event.retry_at < state.deadline_at
                assert event.retry_at >= now
                if result.retry_after_s is not None:
                    assert event.retry_at >= now + timedelta(seconds=result.retry_after_s)
                assert decision.wait_s == (event.retry_at - now).total_seconds() or (
                    abs(decision.wait_s - (event.retry_at - now).total_seconds()) < 1e-3
                )
    # Each retry is spent only while fewer than `minimum + ratio * firsts` have been.
    assert retries == 0 or retries - 1 < minimum + ratio * firsts


@settings(max_examples=300, deadline=None)
@given(
    state=_states([OpStatus.CANCEL_REQUESTED]),
    declaration=_declarations,
    found=_lookups,
    now=_times,
)
def test_a_cancel_after_commit_plans_compensation_not_a_silent_drop(
    state: OperationState, declaration: ToolDeclaration, found: Lookup, now: datetime
) -> None:
    decision = after_cancel(state, declaration, found, now=now, recheck_s=2.0)
    if found.state == "committed":
        assert isinstance(decision, Emit)
        assert decision.done
        kinds = [type(e) for e in decision.events]
        assert kinds == [OperationCommitted, OperationCancelRefused]
        refusal = decision.events[-1]
        assert isinstance(refusal, OperationCancelRefused)
        assert refusal.compensating_tool == declaration.compensating_tool
    cancelled = isinstance(decision, Emit) and any(
        isinstance(e, OperationCancelled) for e in decision.events
    )
    # Cancelled is only reported once the provider confirms it holds no effect.
    assert cancelled == (found.state in {"absent", "cancelled"})


@settings(max_examples=300, deadline=None)
@given(state=_states([OpStatus.CANCEL_REQUESTED]), command=_commands, now=_times)
def test_a_cancel_is_only_ours_alone_when_nothing_can_have_been_sent(
    state: OperationState, command: WorkCommand, now: datetime
) -> None:
    step = next_step(state, command, now)
    if isinstance(step, Emit):
        assert step.events == (OperationCancelled(via="response"),)
        assert state.attempts == 0
        assert state.before_cancel is not OpStatus.RUNNING


@settings(max_examples=300, deadline=None)
@given(
    state=_states([OpStatus.RUNNING]),
    now=_times,
    progress_after=st.floats(0.0, 60.0),
    overdue=st.floats(0.0, 120.0),
)
def test_an_async_wait_notes_progress_once_and_never_sleeps_past_the_overdue_point(
    state: OperationState, now: datetime, progress_after: float, overdue: float
) -> None:
    step = await_completion(
        state, now, progress_after_s=progress_after, callback_overdue_s=overdue, recheck_s=2.0
    )
    if isinstance(step, Emit):
        assert state.progress_notes == 0
        assert [type(e) for e in step.events] == [OperationProgress]
        assert not step.done
    if isinstance(step, Wait):
        since = state.last_attempt_at or now
        assert (
            now
            <= step.until
            <= max(now, since + timedelta(seconds=overdue)) + timedelta(microseconds=1)
        )


@settings(max_examples=400, deadline=None)
@given(
    state=_states([OpStatus.RUNNING]),
    declaration=_declarations,
    result=_results,
    draw=st.floats(0.0, 1.0),
    now=_times,
)
def test_every_attempt_is_recorded_exactly_once(
    *,
    state: OperationState,
    declaration: ToolDeclaration,
    result: AttemptResult,
    draw: float,
    now: datetime,
) -> None:
    """A success's record rides in its commit; any other outcome gets its own event."""
    record = attempted(state.attempts + 1, result)
    decision = after_attempt(state, declaration, result, now=now, draw=draw, budget_ok=True)
    carried = [
        e.attempt for e in decision.events if isinstance(e, OperationCommitted) and e.attempt
    ]
    if result.outcome == "success":
        assert record is None
        assert [(c.attempt, c.http_status) for c in carried] == [
            (state.attempts + 1, result.http_status)
        ]
    else:
        assert isinstance(record, OperationAttempted)
        assert (record.attempt, record.outcome) == (state.attempts + 1, result.outcome)
        assert carried == []
    # Folded in the shell's order, the operation counts the attempt once either way.
    folded = state
    for event in ([record] if record is not None else []) + decision.events:
        folded = operation.evolve(folded, envelope(event, operation_id=state.operation_id))
    assert folded.attempts == state.attempts + 1
