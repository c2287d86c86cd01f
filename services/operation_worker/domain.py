"""The worker's pure decisions: which operation events it runs, the state it may start from
without reading the stream, which step an operation needs next, and what an attempt's, a
cancel's, a lookup's or a poll's outcome means.

No I/O, no clock, no randomness inside: `now` and a uniform random draw are arguments. The
shell (`handlers.py`) only loads, asks these, appends and calls the executor; every step is
a value it executes, so each rule is testable without a broker or a provider.

Over 400 lines on purpose: it is the worker's whole rule book, one place to read every
decision an operation can meet between admission and its terminal state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from libs.domain import OperationState, OpStatus, operation
from libs.events import (
    AttemptRecord,
    CancelOperation,
    CompletionSource,
    Envelope,
    ExecuteOperation,
    OperationAdmitted,
    OperationAttempted,
    OperationCancelled,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCommitted,
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

_RETRYABLE = frozenset(
    {"in_flight_conflict", "rate_limited", "server_error", "connect_error", "timeout_before_send"}
)


# The operation events `policy` turns into work: the worker's consumer on the operations
# stream asks the broker for these kinds only (tests/operations check the two stay equal).
DISPATCHED: tuple[type[OperationEvent], ...] = (OperationAdmitted, OperationCancelRequested)


def policy(event: OperationEvent) -> list[WorkCommand]:
    """Which work an operation event calls for (run by the worker that receives the event)."""
    match event:
        case OperationCancelRequested(reason=reason):
            return [CancelOperation(reason=reason)]
        case OperationAdmitted():
            return [ExecuteOperation()]
    return []


def seeded(
    env: Envelope[OperationEvent], *, stream_seq: int, first: bool
) -> tuple[OperationState, int] | None:
    """The operation as its `operation.admitted` leaves it, and the sequence to append after,
    without reading the stream; None when the stream must be read.

    Only for an admitted event that is the operation's first (`first`: the broker stored it
    under the guard "the operation holds nothing yet"): then this one event is its whole
    history up to `stream_seq`, and the next append, guarded by that sequence, fails if
    anything was written since (a cancel, another worker's start), sending the worker back
    to the stream. An admitted event after others (a confirmation) or appended unguarded (a
    replayed producer) proves nothing about what came before it, so it is never a seed.
    """
    if not first or not isinstance(env.event, OperationAdmitted):
        return None
    return operation.evolve(None, env), stream_seq


def backoff_s(declaration: ToolDeclaration, attempt: int, draw: float, scale: float = 1.0) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2^attempt))."""
    ceiling = min(
        declaration.backoff_max_s, declaration.backoff_base_s * 2.0 ** max(0, attempt - 1)
    )
    return float(ceiling * draw * scale)


class RetryBudget:
    """Retries may be at most `ratio` of first attempts, plus a floor, in a sliding count.

    Keeps a struggling provider from being flattened by retries from every operation at once.
    """

    def __init__(self, ratio: float, minimum: int) -> None:
        self._ratio = ratio
        self._minimum = minimum
        self._firsts = 0
        self._retries = 0

    def record_first(self) -> None:
        """A first attempt happened."""
        self._firsts += 1

    def try_spend(self) -> bool:
        """Take one retry from the budget, if any is left."""
        if self._retries >= self._minimum + self._ratio * self._firsts:
            return False
        self._retries += 1
        return True


@dataclass(frozen=True, slots=True)
class AfterAttempt:
    """What to append after an attempt, and how long to wait before the next step."""

    events: list[OperationEvent]
    wait_s: float = 0.0


def after_attempt(
    state: OperationState,
    declaration: ToolDeclaration,
    result: AttemptResult,
    *,
    now: datetime,
    draw: float,
    budget_ok: bool,
    backoff_scale: float = 1.0,
) -> AfterAttempt:
    """Decide the consequence of one classified attempt (state is before the attempt)."""
    attempt = state.attempts + 1
    match result.outcome:
        case "success":
            return AfterAttempt(
                [
                    OperationCommitted(
                        result=result.result,
                        provider_ref=result.provider_ref,
                        attempt=AttemptRecord(
                            attempt=attempt,
                            http_status=result.http_status,
                            duration_ms=round(result.duration_ms, 3),
                            detail=result.detail[:500],
                        ),
                    )
                ]
            )
        case "accepted_async":
            return AfterAttempt([])
        case "business_error":
            return AfterAttempt(
                [OperationFailedFinal(reason="business_error", detail=result.detail)]
            )
        case "idempotency_conflict":
            return AfterAttempt(
                [OperationFailedFinal(reason="idempotency_conflict", detail=result.detail)]
            )
        case "timeout_after_send":
            return AfterAttempt(
                [OperationUnknown(reason=f"no answer after sending: {result.detail}")]
            )
        case outcome if outcome in _RETRYABLE:
            return _retry(
                state,
                declaration,
                result,
                attempt=attempt,
                now=now,
                draw=draw,
                budget_ok=budget_ok,
                scale=backoff_scale,
            )
    return AfterAttempt([OperationFailedFinal(reason="unclassified", detail=result.outcome)])


def _retry(
    state: OperationState,
    declaration: ToolDeclaration,
    result: AttemptResult,
    *,
    attempt: int,
    now: datetime,
    draw: float,
    budget_ok: bool,
    scale: float,
) -> AfterAttempt:
    if attempt >= declaration.max_attempts:
        detail = f"{attempt} attempts, last: {result.outcome} {result.detail}".strip()
        return AfterAttempt([OperationFailedFinal(reason="retries_exhausted", detail=detail)])
    delay = backoff_s(declaration, attempt, draw, scale)
    if result.retry_after_s is not None:
        # The provider said when to come back; never earlier than that.
        delay = max(delay, result.retry_after_s)
    retry_at = now + timedelta(seconds=delay)
    if state.deadline_at is not None and retry_at >= state.deadline_at:
        return AfterAttempt(
            [OperationFailedFinal(reason="deadline", detail="next try would be past the deadline")]
        )
    if not budget_ok:
        return AfterAttempt(
            [OperationFailedFinal(reason="retry_budget_exhausted", detail=result.outcome)]
        )
    reason = f"{result.outcome}" + (f" {result.http_status}" if result.http_status else "")
    return AfterAttempt(
        [OperationRetryScheduled(attempt=attempt, reason=reason, retry_at=retry_at)], delay
    )


def after_lookup(state: OperationState, found: Lookup) -> list[OperationEvent]:
    """Reconciliation: turn what the system of record holds into the operation's truth."""
    match found.state:
        case "committed":
            return [
                OperationCommitted(
                    result=found.result, provider_ref=found.provider_ref, via="reconcile"
                )
            ]
        case "failed":
            return [
                OperationFailedFinal(
                    reason="failed_at_provider", detail=found.detail, via="reconcile"
                )
            ]
        case "cancelled":
            return [
                OperationFailedFinal(
                    reason="cancelled_at_provider", detail=found.detail, via="reconcile"
                )
            ]
    return []


def completion_events(
    found: Lookup, via: CompletionSource, *, cancel_requested: bool
) -> list[OperationEvent]:
    """Events for an async completion seen through a callback or a poll."""
    match found.state:
        case "committed":
            return [
                OperationCommitted(result=found.result, provider_ref=found.provider_ref, via=via)
            ]
        case "failed":
            return [OperationFailedFinal(reason="failed_at_provider", detail=found.detail, via=via)]
        case "cancelled" if cancel_requested:
            return [OperationCancelled(via=via)]
        case "cancelled":
            return [OperationFailedFinal(reason="cancelled_at_provider", via=via)]
    return []


# -- the next step -----------------------------------------------------------------------
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
    looks again later, so nothing is ever sent twice on a guess.
    """
    if found.state == "absent":
        return Emit((OperationReconciled(detail="no effect at the provider"),), done=False)
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


def after_poll(found: Lookup, *, now: datetime, recheck_s: float) -> Emit | Wait:
    """A poll of an overdue async completion: apply it, or look again later."""
    events = completion_events(found, "poll", cancel_requested=False)
    if events:
        return Emit(tuple(events), done=True)
    return Wait(now + _seconds(recheck_s))


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=max(0.0, value))
