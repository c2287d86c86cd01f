"""What a tool declares: its arguments, how it may run, fail, be cancelled and be repeated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

DuplicatePolicy = Literal["allow", "reject", "replace", "confirm"]
OverflowPolicy = Literal["reject", "queue", "coalesce", "degrade"]
Owner = Literal["session", "agent"]
Priority = Literal["normal", "urgent"]


@dataclass(frozen=True, slots=True)
class Limits:
    """Concurrency limits on open (admitted, not yet terminal) operations of a tool."""

    global_open: int = 1000
    per_tenant_open: int = 200
    per_user_open: int = 16
    # Operations allowed to run at once across workers (None: no limit); the rest wait
    # admitted ("queued") until a slot frees.
    running: int | None = None


@dataclass(frozen=True, slots=True)
class BusinessLimits:
    """Domain limits checked at admission."""

    max_amount_cents: int | None = None
    max_per_user_per_hour: int | None = None


@dataclass(frozen=True, slots=True)
class ToolDeclaration:
    """One tool, declared once: everything admission and the worker need to know about it."""

    name: str
    description: str
    # msgspec.Struct type: validates and normalises arguments, and gives the model its schema.
    arguments: type[Any]
    executor: str
    # A list field whose items become one operation each, and the per-item argument name.
    batch_field: str | None = None
    item_field: str | None = None
    max_batch: int = 20
    idempotent: bool = True
    cancellable: bool = False
    compensating_tool: str | None = None
    # Builds the compensating tool's arguments from this tool's arguments and result.
    compensation_arguments: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    needs_confirmation: bool = False
    subject_key_fields: tuple[str, ...] = ()
    owner: Owner = "session"
    read_only: bool = False
    max_attempts: int = 5
    backoff_base_s: float = 0.2
    backoff_max_s: float = 5.0
    attempt_timeout_s: float = 5.0
    deadline_s: float = 120.0
    priority: Priority = "normal"
    duplicate_policy: DuplicatePolicy = "allow"
    limits: Limits = field(default_factory=Limits)
    overflow: OverflowPolicy = "reject"
    business: BusinessLimits = field(default_factory=BusinessLimits)
    # Agents allowed to use the tool; None means every agent.
    agents: frozenset[str] | None = None
    # Hidden tools (compensations) are not offered to the model directly.
    internal: bool = False
