"""What a tool declares: its arguments, how it may run, fail, be cancelled and be repeated.

Admission enforces only what is declared here; nothing is inferred from an argument's name.
`roles` says which arguments name a resource, an account the caller must own, an amount, or
free text; `business.max_amount` bounds the `amount` argument; `authorise` is an optional
hook for anything else. `label` and `closing` give the words a closing uses.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

DuplicatePolicy = Literal["allow", "reject", "replace", "confirm"]
OverflowPolicy = Literal["reject", "queue", "coalesce", "degrade"]
Owner = Literal["session", "agent"]
Priority = Literal["normal", "urgent"]
# resource: a name, possibly tenant-qualified (`tenant/name`); another tenant's is forbidden.
# owned: must belong to the caller (the user id, the user id then `:` or `/` then more, or one
# of `owned_values`).
# amount: a positive integer, bounded by `business.max_amount`.
# text: free text, only trimmed.
Role = Literal["resource", "owned", "amount", "text"]
ROLES: tuple[Role, ...] = ("resource", "owned", "amount", "text")

_WORD = re.compile(r"[^a-z0-9_-]+")


def normalise_resource(value: str) -> str:
    """Lowercase and collapse what a model or a speech recogniser writes around a name."""
    return _WORD.sub("-", value.strip().lower()).strip("-")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: tenant, user and the active agent."""

    tenant_id: str
    user_id: str
    agent: str


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

    # Upper bound of the argument whose role is `amount` (in that argument's own unit).
    max_amount: int | None = None
    max_per_user_per_hour: int | None = None


@dataclass(frozen=True, slots=True)
class SpeechHints:
    """How callers say a tool's requests, for an offline recognizer's vocabulary."""

    # The names its requests act on ("github", "jira"): `{a}`, `{b}`, `{c}` in the phrases.
    names: tuple[str, ...] = ()
    # (language, phrase template) pairs: ("en", "give me access to {a} and {b}").
    phrases: tuple[tuple[str, str], ...] = ()
    # word -> pronunciations in the recognizer's phone set, for words its dictionary lacks.
    pronunciations: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


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
    # What admission enforces per argument (of one item, for batch tools).
    roles: Mapping[str, Role] = field(default_factory=dict)
    # Values of an `owned` argument that every user owns ("main", "savings").
    owned_values: frozenset[str] = frozenset()
    # Canonical spelling per argument, applied before the intent key (after the role's own).
    normalisers: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    # Anything else to check per item: returns why it is forbidden, or None.
    authorise: Callable[[Mapping[str, Any], Caller], str | None] | None = None
    # The declared opt-out: the tool's arguments name no resource, account or amount.
    open: bool = False
    # What the operation is about in a closing ("50.00 EUR to bob-main").
    label: Callable[[Mapping[str, Any]], str] | None = None
    # A success line from the arguments and the result ("Ticket T-7 is open.").
    closing: Callable[[Mapping[str, Any], Mapping[str, Any]], str] | None = None
    # A failure line from the arguments and why it failed ("No ticket for billing: quota.").
    failure: Callable[[Mapping[str, Any], str], str] | None = None
    # Async completions are polled from the start (no callback ever comes: MCP tasks).
    polled: bool = False
    # What an offline recognizer should expect callers to say for this tool (None: nothing).
    speech: SpeechHints | None = None
