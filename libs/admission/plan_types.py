"""The shapes of an admission turn: the calls, who asks, the plans and the answers.

Plain data and the read-only view the planner depends on; no I/O and no decisions here
(the planner is `plan.py`, the events a plan writes `writes.py`, the answers `answers.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from libs.domain import OperationState, OpStatus
from libs.events import RejectReason
from libs.tools import ToolDeclaration

from .rules import Load

PlanKind = Literal["admit", "reject", "confirm", "existing"]
NewId = Callable[[str], str]
# Capacity one admission holds while its events are being written: (tool, tenant, user).
Reservation = tuple[str, str, str]

REUSABLE = frozenset({OpStatus.FAILED_FINAL, OpStatus.CANCELLED, OpStatus.REJECTED})
# A join of another session's operation: that session's batch carries the closing.
ELSEWHERE = "handled_elsewhere"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model proposed it."""

    tool: str
    arguments: dict[str, Any]
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Who is asking, in which session, turn and agent."""

    session_id: str
    turn_id: str
    tenant_id: str
    user_id: str
    agent: str


@dataclass(frozen=True, slots=True)
class AdmissionOutcome:
    """What admission answered for one item."""

    operation_id: str
    tool: str
    status: str
    batch_id: str | None
    intent_key: str | None = None
    existing: bool = False
    reason: str | None = None
    detail: str = ""
    prompt: str | None = None
    subject_key: str | None = None
    # Older operations this one replaces (cancelled, or compensated when already done).
    supersedes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnAdmission:
    """Every outcome of one turn, and its batch (None when nothing new was created)."""

    batch_id: str | None
    outcomes: tuple[AdmissionOutcome, ...]


@dataclass(slots=True)
class Plan:
    """What one item of a turn becomes."""

    kind: PlanKind
    tool: str
    operation_id: str
    tool_call_id: str | None = None
    declaration: ToolDeclaration | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    intent_key: str | None = None
    subject_key: str | None = None
    reason: RejectReason | None = None
    detail: str = ""
    existing: OperationState | None = None
    supersedes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AdmissionPlan:
    """A turn's plans, and the capacity they hold until their events are written."""

    plans: tuple[Plan, ...]
    reservations: tuple[Reservation, ...]


class PlanView(Protocol):
    """The reads of live operations the planner depends on."""

    def get(self, operation_id: str) -> OperationState | None: ...
    def by_intent(self, intent_key: str) -> OperationState | None: ...
    def load(self, tool: str, tenant_id: str, user_id: str) -> Load: ...
    def recent(self, tool: str, user_id: str, now: datetime, window: timedelta) -> int: ...
    def on_subject(self, session_id: str, subject_key: str) -> list[OperationState]: ...
    def open_with_digest(
        self, tenant_id: str, tool: str, args_digest: str
    ) -> OperationState | None: ...

