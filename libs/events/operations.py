"""Operation events: the life of one business operation, from request to terminal state."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from .base import EventPart, StreamEvent

Owner = Literal["session", "agent"]
Priority = Literal["normal", "urgent"]

RejectReason = Literal[
    "unknown_tool",
    "invalid_arguments",
    "forbidden",
    "agent_not_allowed",
    "over_limit",
    "backpressure",
    "duplicate",
    "confirmation_declined",
    "batch_too_large",
    # Its turn died between `batch.opened` and the admission; the coordinator closed it.
    "interrupted",
    # Its source (an MCP server) cannot be reached right now; the detail says why.
    "tool_unavailable",
]

AttemptOutcome = Literal[
    "success",
    "accepted_async",
    "business_error",
    "idempotency_conflict",
    "in_flight_conflict",
    "rate_limited",
    "server_error",
    "connect_error",
    "timeout_before_send",
    "timeout_after_send",
    # Sent, the answer lost, and nothing to reconcile through: failed for good, never re-sent.
    "unknown_outcome",
]

CompletionSource = Literal["response", "callback", "poll", "reconcile", "operator"]


class _Event(StreamEvent, frozen=True, kw_only=True):
    pass


class OperationRequested(_Event, frozen=True, kw_only=True, tag="operation.requested"):
    """The model proposed a tool call; nothing is admitted yet."""

    tool: str
    arguments: dict[str, Any]


class OperationAwaitingConfirmation(
    _Event, frozen=True, kw_only=True, tag="operation.awaiting_confirmation"
):
    """The tool needs the user's explicit yes before admission."""

    prompt: str


class OperationConfirmed(_Event, frozen=True, kw_only=True, tag="operation.confirmed"):
    """The user confirmed an operation that needed confirmation."""


class OperationAdmitted(_Event, frozen=True, kw_only=True, tag="operation.admitted"):
    """The application validated, authorised and accepted the intent."""

    tool: str
    arguments: dict[str, Any]
    tenant_id: str
    user_id: str
    owner: Owner = "session"
    priority: Priority = "normal"
    idempotent: bool = True
    # Set when this operation compensates an earlier, committed one.
    compensates: str | None = None
    deadline_at: datetime | None = None


class OperationRejected(_Event, frozen=True, kw_only=True, tag="operation.rejected"):
    """Admission refused the intent; the reason is machine-readable."""

    tool: str
    reason: RejectReason
    detail: str


class OperationStarted(_Event, frozen=True, kw_only=True, tag="operation.started"):
    """A worker took the operation and is about to call the system of record."""

    worker_id: str
    attempt: int


class OperationAttempted(_Event, frozen=True, kw_only=True, tag="operation.attempted"):
    """One HTTP try against the system of record and how it was classified."""

    attempt: int
    outcome: AttemptOutcome
    http_status: int | None = None
    duration_ms: float = 0.0
    retry_after_s: float | None = None
    # The system of record's id for the effect, when it gave one (async completions).
    provider_ref: str | None = None
    detail: str = ""


class OperationProgress(_Event, frozen=True, kw_only=True, tag="operation.progress"):
    """A non-final update from a long operation."""

    message: str
    is_final: Literal[False] = False


class OperationRetryScheduled(_Event, frozen=True, kw_only=True, tag="operation.retry_scheduled"):
    """The last attempt failed in a retryable way; the next one is due at retry_at."""

    attempt: int
    reason: str
    retry_at: datetime


class OperationUnknown(_Event, frozen=True, kw_only=True, tag="operation.unknown"):
    """A mutation was sent and its answer lost; reconcile before any resend."""

    reason: str


class OperationReconciled(_Event, frozen=True, kw_only=True, tag="operation.reconciled"):
    """The system of record was asked and holds no effect: a resend is now safe."""

    detail: str = ""


class AttemptRecord(EventPart, frozen=True, kw_only=True):
    """A successful HTTP try, recorded in the commit it decided."""

    attempt: int
    http_status: int | None = None
    duration_ms: float = 0.0
    detail: str = ""


class OperationCommitted(_Event, frozen=True, kw_only=True, tag="operation.committed"):
    """The system of record confirmed the effect."""

    result: dict[str, Any]
    provider_ref: str | None = None
    via: CompletionSource = "response"
    # Set when the commit is a successful attempt's answer: that attempt's record, which no
    # separate `operation.attempted` repeats (every other outcome is recorded on its own).
    attempt: AttemptRecord | None = None


class OperationFailedFinal(_Event, frozen=True, kw_only=True, tag="operation.failed_final"):
    """The operation ended without effect and will not be retried."""

    reason: str
    detail: str = ""
    via: CompletionSource = "response"


class OperationCancelRequested(_Event, frozen=True, kw_only=True, tag="operation.cancel_requested"):
    """Someone explicitly asked to cancel the operation."""

    requested_by: str
    reason: str


class OperationCancelled(_Event, frozen=True, kw_only=True, tag="operation.cancelled"):
    """The operation is confirmed cancelled and never committed."""

    via: CompletionSource = "response"


class OperationCancelRefused(_Event, frozen=True, kw_only=True, tag="operation.cancel_refused"):
    """Cancellation was impossible (already committed); compensation may be offered."""

    reason: str
    compensating_tool: str | None = None


class OperationCompensated(_Event, frozen=True, kw_only=True, tag="operation.compensated"):
    """A linked compensation operation was admitted for this committed operation."""

    compensation_operation_id: str


class OperationDeadLettered(_Event, frozen=True, kw_only=True, tag="operation.dead_lettered"):
    """The operation's work was moved to the dead-letter stream with its reason."""

    reason: str


OperationEvent = (
    OperationRequested
    | OperationAwaitingConfirmation
    | OperationConfirmed
    | OperationAdmitted
    | OperationRejected
    | OperationStarted
    | OperationAttempted
    | OperationProgress
    | OperationRetryScheduled
    | OperationUnknown
    | OperationReconciled
    | OperationCommitted
    | OperationFailedFinal
    | OperationCancelRequested
    | OperationCancelled
    | OperationCancelRefused
    | OperationCompensated
    | OperationDeadLettered
)
