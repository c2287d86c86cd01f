"""The worker's pure decisions: which operation events it runs, the state it may start from
without reading the stream, how an attempt's outcome is retried, and what a lookup or a
completion means. Which step an operation needs next, and what each step's outcome leads
to, is `stepping.py`.

No I/O, no clock, no randomness inside: `now` and a uniform random draw are arguments. The
shell (`handlers.py`, `steps.py`) only loads, asks these, appends and calls the executor;
every step is a value it executes, so each rule is testable without a broker or a provider.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from libs.domain import OperationState, operation
from libs.events import (
    AttemptRecord,
    CancelOperation,
    CompletionSource,
    Envelope,
    ExecuteOperation,
    OperationAdmitted,
    OperationCancelled,
    OperationCancelRequested,
    OperationCommitted,
    OperationEvent,
    OperationFailedFinal,
    OperationRetryScheduled,
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
        case "unknown_outcome":
            return AfterAttempt(
                [OperationFailedFinal(reason="unknown_outcome", detail=result.detail)]
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
