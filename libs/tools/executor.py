"""How an operation reaches its system of record: a small Protocol and its results.

An executor performs one attempt, looks an effect up for reconciliation, cancels, and polls
async completions. It classifies what happened; the worker decides what that means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from libs.events import AttemptOutcome


@dataclass(frozen=True, slots=True)
class OperationCall:
    """What an executor needs to know about the operation it acts on."""

    operation_id: str
    session_id: str
    tool: str
    arguments: dict[str, Any]
    tenant_id: str
    user_id: str
    idempotency_key: str
    reference: str
    result: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """The classified outcome of one attempt."""

    outcome: AttemptOutcome
    http_status: int | None = None
    retry_after_s: float | None = None
    result: dict[str, Any] = field(default_factory=dict)
    provider_ref: str | None = None
    detail: str = ""
    duration_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Lookup:
    """What the system of record says about an effect, for reconciliation and polling."""

    state: Literal["committed", "pending", "absent", "failed", "cancelled", "error"]
    result: dict[str, Any] = field(default_factory=dict)
    provider_ref: str | None = None
    detail: str = ""


class Executor(Protocol):
    """A side effect behind a name; tests and users register their own."""

    async def execute(self, call: OperationCall, *, timeout_s: float) -> AttemptResult:
        """Perform one attempt, always sending the idempotency key."""
        ...

    async def lookup(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Find the effect at the system of record by key or reference."""
        ...

    async def cancel(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Ask the system of record to cancel; returns the state it confirms."""
        ...
