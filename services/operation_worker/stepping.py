"""The worker's step rules: which step an operation needs next, and what the outcome of an
attempt, a cancel, a reconciliation or a poll leads to (pure, as `domain.py`).

Every step is a value the shell (`steps.py`) executes: Stop, DeadLetterIt, Emit, Wait,
Attempt, CancelAtProvider, Reconcile, AwaitCompletion, PollProvider.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from libs.domain import OperationState, OpStatus
from libs.events import (
    CancelOperation,
    CompletionSource,
    OperationAttempted,
    OperationCancelled,
    OperationCancelRefused,
    OperationEvent,
    OperationFailedFinal,
    OperationProgress,
    OperationReconciled,
    OperationRetryScheduled,
    OperationStarted,
    OperationUnknown,
    WorkCommand,
)
from libs.tools import AttemptResult, Lookup, ToolDeclaration

from .domain import (
    AfterAttempt,
    RetryBudget,
    after_attempt,
    after_lookup,
    completion_events,
)

# How long past its deadline an unresolved operation is still watched before an operator
# has to look at it (it is then dead-lettered with its full history).
GRACE_S = 60.0


@dataclass(frozen=True, slots=True)
class Stop:
    """This worker is done with the operation (terminal, not ours to run, or nothing to do)."""


@dataclass(frozen=True, slots=True)
class DeadLetterIt:
    """Give the operation to an operator, with its full history."""

    reason: str


@dataclass(frozen=True, slots=True)
class Emit:
    """Append these events; `done` says whether this worker then lets go of the operation."""

    events: tuple[OperationEvent, ...]
    done: bool


@dataclass(frozen=True, slots=True)
class Wait:
    """Sleep until `until` (earlier if the operation changes), then decide again."""

    until: datetime


@dataclass(frozen=True, slots=True)
class Attempt:
    """Send attempt number `attempt` to the system of record."""

    attempt: int


@dataclass(frozen=True, slots=True)
class CancelAtProvider:
    """Ask the provider to cancel (or, for a tool that cannot be cancelled, what it holds)."""


@dataclass(frozen=True, slots=True)
class Reconcile:
    """UNKNOWN: look the operation up at the system of record before anything is resent."""


@dataclass(frozen=True, slots=True)
class AwaitCompletion:
    """Accepted asynchronously: wait for the callback, poll once it is overdue."""


@dataclass(frozen=True, slots=True)
class PollProvider:
    """The callback is overdue: ask the provider for the completion."""


Step = Stop | DeadLetterIt | Emit | Wait | Attempt | CancelAtProvider | Reconcile | AwaitCompletion


def next_step(state: OperationState, command: WorkCommand, now: datetime) -> Step:
    """What the operation needs next, from its folded state and the work command."""
    if state.terminal:
        return Stop()
    if (
        state.deadline_at is not None
        and not state.dead_lettered
        and (now - state.deadline_at).total_seconds() > GRACE_S
    ):
        return DeadLetterIt("unresolved past its deadline; an operator must decide")
    match state.status:
        case OpStatus.AWAITING_CONFIRMATION | OpStatus.REQUESTED:
            return Stop()
        case OpStatus.CANCEL_REQUESTED:
            if state.attempts == 0 and state.before_cancel is not OpStatus.RUNNING:
                # Nothing was ever sent: cancelling is purely ours to do. (Cancelled while
                # RUNNING with no attempt recorded, a request may be at the provider.)
                return Emit((OperationCancelled(via="response"),), done=True)
            return CancelAtProvider()
        case OpStatus.UNKNOWN:
            return Reconcile()
        case OpStatus.RUNNING if state.awaiting_async:
            return AwaitCompletion()
        case OpStatus.RUNNING if not state.idempotent:
            # A worker died mid-attempt of a non-idempotent call: it may have been sent.
            return Emit((OperationUnknown(reason="worker stopped during an attempt"),), done=False)
        case OpStatus.FAILED_RETRYABLE if state.retry_at and state.retry_at > now:
            return Wait(state.retry_at)
    if isinstance(command, CancelOperation) and state.status is OpStatus.ADMITTED:
        return Stop()
    if state.deadline_at is not None and now >= state.deadline_at:
        return Emit(
            (OperationFailedFinal(reason="deadline", detail="not started before the deadline"),),
            done=True,
        )
    return Attempt(state.attempts + 1)


def started(state: OperationState, worker_id: str) -> OperationStarted:
    """The event that opens the next attempt."""
    return OperationStarted(worker_id=worker_id, attempt=state.attempts + 1)


def attempted(attempt: int, result: AttemptResult) -> OperationAttempted | None:
    """The record of one attempt's classified outcome, appended before what it decides;
    None for a success, whose commit carries its record (`after_attempt`): one guarded
    append per successful attempt instead of two, on the path every operation takes."""
    if result.outcome == "success":
        return None
    return OperationAttempted(
        attempt=attempt,
        outcome=result.outcome,
        http_status=result.http_status,
        duration_ms=round(result.duration_ms, 3),
        retry_after_s=result.retry_after_s,
        provider_ref=result.provider_ref,
        detail=result.detail[:500],
    )


def after_attempt_budgeted(
    state: OperationState,
    declaration: ToolDeclaration,
    result: AttemptResult,
    *,
    now: datetime,
    draw: float,
    budget: RetryBudget,
    backoff_scale: float = 1.0,
) -> AfterAttempt:
    """`after_attempt`, spending one retry from the process's budget only if it retries."""
    decision = after_attempt(
        state, declaration, result, now=now, draw=draw, budget_ok=True, backoff_scale=backoff_scale
    )
    retrying = any(isinstance(e, OperationRetryScheduled) for e in decision.events)
    if retrying and not budget.try_spend():
        return after_attempt(state, declaration, result, now=now, draw=0.0, budget_ok=False)
    return decision


def after_cancel(
    state: OperationState,
    declaration: ToolDeclaration,
    found: Lookup,
    *,
    now: datetime,
    recheck_s: float,
) -> Emit | Wait:
    """What the provider's answer to a cancel (or a lookup, if not cancellable) means.

    A cancel that arrives after the effect committed is refused with the compensating tool
    named, never dropped: the caller must learn that the effect happened.
    """
    match found.state:
        case "absent" | "cancelled":
            via: CompletionSource = "reconcile" if found.state == "absent" else "response"
            return Emit((OperationCancelled(via=via),), done=True)
        case "committed":
            events = completion_events(found, "reconcile", cancel_requested=True)
            refusal = OperationCancelRefused(
                reason="already committed", compensating_tool=declaration.compensating_tool
            )
            return Emit((*events, refusal), done=True)
        case "failed":
            return Emit(
                (
                    OperationFailedFinal(
                        reason="failed_at_provider", detail=found.detail, via="reconcile"
                    ),
                ),
                done=True,
            )
        case "pending" if not declaration.cancellable:
            return Emit(
                (OperationCancelRefused(reason=f"{state.tool} cannot be cancelled once sent"),),
                done=False,
            )
    return Wait(now + _seconds(recheck_s))


def after_reconcile(
    state: OperationState, found: Lookup, *, now: datetime, recheck_s: float
) -> Emit | Wait:
    """The system of record's answer for an UNKNOWN operation.

    Only an explicit "absent" reopens the operation for a resend; pending or unreachable
    looks again later, so nothing is ever sent twice on a guess. "unknown" (nothing can be
    asked: an MCP tool with no lookup tool) ends it as `unknown_outcome`, never re-sent.
    """
    if found.state == "absent":
        return Emit((OperationReconciled(detail="no effect at the provider"),), done=False)
    if found.state == "unknown":
        failed = OperationFailedFinal(
            reason="unknown_outcome", detail=found.detail, via="reconcile"
        )
        return Emit((failed,), done=True)
    events = after_lookup(state, found)
    if events:
        return Emit(tuple(events), done=True)
    return Wait(now + _seconds(recheck_s))


def await_completion(
    state: OperationState,
    now: datetime,
    *,
    progress_after_s: float,
    callback_overdue_s: float,
    recheck_s: float,
) -> Emit | Wait | PollProvider:
    """Accepted asynchronously: one progress note on a long wait, then poll once overdue."""
    since = state.last_attempt_at or now
    waited = (now - since).total_seconds()
    if waited >= progress_after_s and state.progress_notes == 0:
        # A long wait gets one non-final update, so the conversation can say so.
        return Emit((OperationProgress(message="accepted; waiting for confirmation"),), done=False)
    if waited < callback_overdue_s:
        return Wait(now + _seconds(min(recheck_s, callback_overdue_s - waited)))
    return PollProvider()


def after_poll(
    found: Lookup, *, now: datetime, recheck_s: float, last_progress: str | None = None
) -> Emit | Wait:
    """A poll of an overdue async completion: apply it, or look again later.

    A pending answer with a new message (an MCP task's status) is passed on as progress."""
    events = completion_events(found, "poll", cancel_requested=False)
    if events:
        return Emit(tuple(events), done=True)
    if (
        found.state == "pending"
        and found.detail
        and last_progress is not None
        and found.detail != last_progress
    ):
        return Emit((OperationProgress(message=found.detail[:200]),), done=False)
    return Wait(now + _seconds(recheck_s))


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=max(0.0, value))
