"""How an operation reaches its system of record: a small Protocol and its results.

An executor performs one attempt, looks an effect up for reconciliation, cancels, polls
async completions and turns a provider's callback into a result after checking that the
provider sent it. It classifies what happened; the worker decides what that means, and
knows nothing else about any executor.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    # The system of record's id for the effect, once an attempt or lookup gave one.
    provider_ref: str | None = None


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

    # "unknown": the system of record cannot be asked (no lookup exists); the effect may or
    # may not exist, and nothing is sent again.
    state: Literal["committed", "pending", "absent", "failed", "cancelled", "error", "unknown"]
    result: dict[str, Any] = field(default_factory=dict)
    provider_ref: str | None = None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CallbackResult:
    """A verified provider callback: the operation it is about and what the provider says."""

    operation_id: str
    found: Lookup
    # Known when the provider echoes our reference (`<session_id>/<operation_id>`).
    session_id: str | None = None
    callback_id: str | None = None


class CallbackRefused(Exception):
    """A callback that must not be applied: answered as problem+json, nothing appended."""

    def __init__(self, status: int, title: str, detail: str, *, slug: str) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.slug = slug


def bad_signature(detail: str = "missing, stale or wrong callback signature") -> CallbackRefused:
    """The refusal every executor gives a callback it cannot verify."""
    return CallbackRefused(401, "Unauthorized", detail, slug="bad-signature")


def bad_callback(detail: str) -> CallbackRefused:
    """A verified callback whose body says nothing usable."""
    return CallbackRefused(400, "Bad request", detail, slug="bad-callback")


class Executor(Protocol):
    """A side effect behind a name; tests and users register their own.

    `execute`, `lookup`, `cancel` and `poll` may be called by any worker at any time for the
    same operation (after a crash, a redelivery), so each must be safe to repeat; the
    idempotency key in the call is the same every time.
    """

    async def execute(self, call: OperationCall, *, timeout_s: float) -> AttemptResult:
        """Perform one attempt, always sending the idempotency key."""
        ...

    async def lookup(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Find the effect at the system of record by key or reference."""
        ...

    async def cancel(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Ask the system of record to cancel; returns the state it confirms."""
        ...

    async def poll(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Read an async effect's current state (`call.provider_ref` when one was given)."""
        ...

    def parse_callback(
        self, headers: Mapping[str, str], body: bytes, *, now: float
    ) -> CallbackResult:
        """Verify a provider callback (raise `CallbackRefused` if unsigned) and read it."""
        ...
