"""The operation state machine of docs/contract.md §4, as a pure fold over operation events.

`evolve` refuses an illegal transition with `IllegalTransition`; it never guesses. The one
rule worth stating twice: a non-idempotent operation whose last mutation may have been sent
(RUNNING after a crash, or UNKNOWN) cannot start again until it was reconciled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from libs.events import (
    Envelope,
    OperationAdmitted,
    OperationAttempted,
    OperationAwaitingConfirmation,
    OperationCancelled,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCommitted,
    OperationCompensated,
    OperationConfirmed,
    OperationDeadLettered,
    OperationEvent,
    OperationFailedFinal,
    OperationProgress,
    OperationReconciled,
    OperationRejected,
    OperationRequested,
    OperationRetryScheduled,
    OperationStarted,
    OperationUnknown,
)

from .evolving import evolved


class OpStatus(StrEnum):
    """Operation states; the API shows the lowercase values."""

    REQUESTED = "requested"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    ADMITTED = "admitted"
    RUNNING = "running"
    COMMITTED = "committed"
    FAILED_RETRYABLE = "failed_retryable"
    FAILED_FINAL = "failed_final"
    UNKNOWN = "unknown"
    CANCEL_REQUESTED = "cancel_requested"
    CANCELLED = "cancelled"
    REJECTED = "rejected"


TERMINAL: frozenset[OpStatus] = frozenset(
    {OpStatus.COMMITTED, OpStatus.FAILED_FINAL, OpStatus.CANCELLED, OpStatus.REJECTED}
)


# The failure each kind leaves on an operation, for every fold that words a closing alike.
RECONCILED_FAILURE = "reconciled: no effect found"


def rejection_failure(event: OperationRejected) -> str:
    """An operation's failure once admission rejected it."""
    return f"{event.reason}: {event.detail}"


def final_failure(event: OperationFailedFinal) -> str:
    """An operation's failure once it failed for good."""
    return f"{event.reason}: {event.detail}".rstrip(": ")


class IllegalTransition(Exception):
    """An event that the operation's current state does not allow."""

    def __init__(self, operation_id: str, status: OpStatus | None, event_type: str) -> None:
        state = status.value if status else "none"
        super().__init__(f"operation {operation_id}: {event_type} is illegal in state {state}")
        self.operation_id = operation_id
        self.status = status
        self.event_type = event_type


@dataclass(frozen=True, slots=True)
class OperationState:
    """What is known about one operation after folding its events."""

    operation_id: str
    session_id: str
    status: OpStatus
    tool: str
    arguments: dict[str, Any]
    batch_id: str | None = None
    intent_key: str | None = None
    subject_key: str | None = None
    turn_id: str | None = None
    agent: str | None = None
    tenant_id: str | None = None
    user_id: str | None = None
    owner: str = "session"
    priority: str = "normal"
    idempotent: bool = True
    confirmed: bool = False
    attempts: int = 0
    # The provider's id for the effect, once known, and whether an async answer is awaited.
    provider_ref: str | None = None
    awaiting_async: bool = False
    retry_at: datetime | None = None
    admitted_at: datetime | None = None
    deadline_at: datetime | None = None
    last_attempt_at: datetime | None = None
    progress_notes: int = 0
    # The last `operation.progress` message (a poll passes a new one on, not a repeat).
    last_progress: str = ""
    # Status to return to if a cancel request is refused.
    before_cancel: OpStatus | None = None
    result: dict[str, Any] | None = None
    failure: str | None = None
    compensates: str | None = None
    compensated_by: str | None = None
    dead_lettered: bool = False
    version: int = 0

    @property
    def terminal(self) -> bool:
        """Whether the operation reached COMMITTED, FAILED_FINAL, CANCELLED or REJECTED."""
        return self.status in TERMINAL


S = OpStatus

# Which states each event may be applied in.
_ALLOWED: dict[type[Any], frozenset[OpStatus | None]] = {
    OperationRequested: frozenset({None}),
    OperationAwaitingConfirmation: frozenset({S.REQUESTED}),
    OperationConfirmed: frozenset({S.AWAITING_CONFIRMATION}),
    OperationAdmitted: frozenset({None, S.REQUESTED, S.AWAITING_CONFIRMATION}),
    OperationRejected: frozenset({None, S.REQUESTED, S.AWAITING_CONFIRMATION}),
    OperationStarted: frozenset({S.ADMITTED, S.FAILED_RETRYABLE, S.RUNNING}),
    OperationAttempted: frozenset({S.RUNNING, S.CANCEL_REQUESTED, S.UNKNOWN}),
    OperationProgress: frozenset({S.RUNNING, S.CANCEL_REQUESTED}),
    OperationRetryScheduled: frozenset({S.RUNNING}),
    OperationReconciled: frozenset({S.UNKNOWN}),
    OperationUnknown: frozenset({S.RUNNING, S.CANCEL_REQUESTED}),
    OperationCommitted: frozenset({S.RUNNING, S.UNKNOWN, S.CANCEL_REQUESTED}),
    OperationFailedFinal: frozenset(
        {S.ADMITTED, S.RUNNING, S.FAILED_RETRYABLE, S.UNKNOWN, S.CANCEL_REQUESTED}
    ),
    OperationCancelRequested: frozenset(
        {S.AWAITING_CONFIRMATION, S.ADMITTED, S.RUNNING, S.FAILED_RETRYABLE, S.UNKNOWN}
    ),
    OperationCancelled: frozenset({S.CANCEL_REQUESTED}),
    OperationCancelRefused: frozenset(
        {S.CANCEL_REQUESTED, S.COMMITTED, S.FAILED_FINAL, S.CANCELLED, S.REJECTED}
    ),
    OperationCompensated: frozenset({S.COMMITTED}),
    OperationDeadLettered: frozenset(set(OpStatus)),
}


def _check(state: OperationState | None, env: Envelope[OperationEvent]) -> None:
    event = env.event
    status = state.status if state else None
    op_id = env.operation_id or (state.operation_id if state else "?")
    if status not in _ALLOWED[type(event)]:
        raise IllegalTransition(op_id, status, event.__struct_config__.tag)  # type: ignore[arg-type]
    if state is None:
        return
    match event:
        case OperationAdmitted() if status is S.AWAITING_CONFIRMATION and not state.confirmed:
            raise IllegalTransition(op_id, status, "operation.admitted (not confirmed)")
        case OperationStarted() if status is S.RUNNING and not state.idempotent:
            # A crash mid-attempt of a non-idempotent call: UNKNOWN and reconcile first.
            raise IllegalTransition(op_id, status, "operation.started (unreconciled resend)")
        case _:
            pass


def envelope_for(
    state: OperationState, event: OperationEvent, *, event_id: str, now: datetime
) -> Envelope[OperationEvent]:
    """An event about an existing operation, carrying every id the operation knows."""
    return Envelope(
        event_id=event_id,
        occurred_at=now,
        session_id=state.session_id,
        turn_id=state.turn_id,
        operation_id=state.operation_id,
        intent_key=state.intent_key,
        subject_key=state.subject_key,
        batch_id=state.batch_id,
        agent=state.agent,
        event=event,
    )


def evolve(state: OperationState | None, env: Envelope[OperationEvent]) -> OperationState:
    """Apply one event to an operation, or raise IllegalTransition."""
    _check(state, env)
    event = env.event
    if state is None:
        state = OperationState(
            operation_id=env.operation_id or "",
            session_id=env.session_id,
            status=S.REQUESTED,
            tool="",
            arguments={},
            batch_id=env.batch_id,
            intent_key=env.intent_key,
            subject_key=env.subject_key,
            turn_id=env.turn_id,
            agent=env.agent,
        )
    # The version bump travels in the one copy each event makes.
    v = state.version + 1
    match event:
        case OperationRequested(tool=tool, arguments=arguments):
            return evolved(state, version=v, tool=tool, arguments=arguments, status=S.REQUESTED)
        case OperationAwaitingConfirmation():
            return evolved(state, version=v, status=S.AWAITING_CONFIRMATION)
        case OperationConfirmed():
            return evolved(state, version=v, confirmed=True)
        case OperationAdmitted():
            return evolved(
                state,
                version=v,
                status=S.ADMITTED,
                tool=event.tool,
                arguments=event.arguments,
                tenant_id=event.tenant_id,
                user_id=event.user_id,
                owner=event.owner,
                priority=event.priority,
                idempotent=event.idempotent,
                compensates=event.compensates,
                admitted_at=env.occurred_at,
                deadline_at=event.deadline_at,
                batch_id=env.batch_id or state.batch_id,
                intent_key=env.intent_key or state.intent_key,
                subject_key=env.subject_key or state.subject_key,
            )
        case OperationRejected(tool=tool):
            return evolved(
                state, version=v, status=S.REJECTED, tool=tool or state.tool,
                failure=rejection_failure(event),
            )
        case OperationStarted():
            return evolved(state, version=v, status=S.RUNNING, awaiting_async=False, retry_at=None)
        case OperationAttempted(outcome=outcome, provider_ref=ref):
            return evolved(
                state,
                version=v,
                attempts=state.attempts + 1,
                provider_ref=ref or state.provider_ref,
                awaiting_async=outcome == "accepted_async",
                last_attempt_at=env.occurred_at,
            )
        case OperationProgress(message=message):
            return evolved(
                state, version=v, progress_notes=state.progress_notes + 1, last_progress=message
            )
        case OperationRetryScheduled(reason=reason, retry_at=retry_at):
            return evolved(
                state, version=v, status=S.FAILED_RETRYABLE, failure=reason, retry_at=retry_at
            )
        case OperationReconciled():
            return evolved(state, version=v, status=S.FAILED_RETRYABLE, failure=RECONCILED_FAILURE)
        case OperationUnknown(reason=reason):
            return evolved(state, version=v, status=S.UNKNOWN, failure=reason)
        case OperationCommitted(result=result, provider_ref=ref, attempt=record):
            # A successful attempt's commit counts the attempt it records.
            tried = record is not None
            return evolved(
                state,
                version=v,
                status=S.COMMITTED,
                result=result,
                failure=None,
                awaiting_async=False,
                provider_ref=ref or state.provider_ref,
                attempts=state.attempts + 1 if tried else state.attempts,
                last_attempt_at=env.occurred_at if tried else state.last_attempt_at,
            )
        case OperationFailedFinal():
            return evolved(state, version=v, status=S.FAILED_FINAL, failure=final_failure(event))
        case OperationCancelRequested():
            return evolved(state, version=v, status=S.CANCEL_REQUESTED, before_cancel=state.status)
        case OperationCancelled():
            return evolved(state, version=v, status=S.CANCELLED)
        case OperationCancelRefused():
            if state.status is S.CANCEL_REQUESTED:
                back = state.before_cancel or S.RUNNING
                return evolved(state, version=v, status=back, before_cancel=None)
            return evolved(state, version=v)
        case OperationCompensated(compensation_operation_id=comp):
            return evolved(state, version=v, compensated_by=comp)
        case OperationDeadLettered():
            return evolved(state, version=v, dead_lettered=True)
    raise IllegalTransition(state.operation_id, state.status, type(event).__name__)
