"""Pure admission rules: validation, authorisation, business limits, backpressure.

Each returns None when the item may proceed, or a (reason, detail) pair that becomes an
`operation.rejected` event. Nothing here touches the network or the clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from libs.events import RejectReason
from libs.tools import ToolDeclaration, normalise_resource

Refusal = tuple[RejectReason, str]

_QUALIFIED = re.compile(r"^(?P<tenant>[A-Za-z0-9_.-]{1,64})[/:](?P<name>.+)$")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who asks: tenant, user and the active agent."""

    tenant_id: str
    user_id: str
    agent: str


def agent_allowed(tool: ToolDeclaration, caller: Caller) -> Refusal | None:
    """The active agent may use the tool."""
    if tool.agents is not None and caller.agent not in tool.agents:
        return "agent_not_allowed", f"agent {caller.agent!r} may not use {tool.name}"
    return None


def expand(tool: ToolDeclaration, arguments: Mapping[str, Any]) -> list[dict[str, Any]] | Refusal:
    """Split a batch call into one argument set per item."""
    if tool.batch_field is None or tool.item_field is None:
        return [dict(arguments)]
    items = arguments.get(tool.batch_field)
    if not isinstance(items, list) or not items:
        return "invalid_arguments", f"{tool.batch_field} must be a non-empty list"
    if len(items) > tool.max_batch:
        return "batch_too_large", f"{len(items)} items > {tool.max_batch} allowed in one call"
    extra = set(arguments) - {tool.batch_field}
    if extra:
        return "invalid_arguments", f"unknown arguments: {', '.join(sorted(extra))}"
    return [{tool.item_field: item} for item in items]


def authorise(
    tool: ToolDeclaration, item: dict[str, Any], caller: Caller
) -> Refusal | dict[str, Any]:
    """Refuse another tenant's resources and other users' accounts; strip own qualifiers."""
    cleaned: dict[str, Any] = {}
    for name, value in item.items():
        cleaned[name] = value
        if isinstance(value, str):
            match = _QUALIFIED.match(value.strip())
            if match and name not in {"date", "time"}:
                if match["tenant"] != caller.tenant_id:
                    return "forbidden", f"{name} {value!r} belongs to another tenant"
                cleaned[name] = match["name"]
    source = cleaned.get("from_account")
    if (
        isinstance(source, str)
        and source not in {"main", "savings"}
        and not source.startswith(f"{caller.user_id}-")
    ):
        return "forbidden", f"account {source!r} is not one of the user's accounts"
    return cleaned


def normalise(item: dict[str, Any]) -> dict[str, Any]:
    """Canonical spelling of resource-like arguments, so equal intents hash equally."""
    out = dict(item)
    for name in ("access", "restaurant"):
        value = out.get(name)
        if isinstance(value, str):
            out[name] = normalise_resource(value)
    for name in ("to_account", "from_account", "currency"):
        value = out.get(name)
        if isinstance(value, str):
            out[name] = value.strip().upper() if name == "currency" else value.strip()
    return out


def validate(tool: ToolDeclaration, item: dict[str, Any]) -> Refusal | dict[str, Any]:
    """Check types and ranges against the tool's schema; returns arguments with defaults."""
    try:
        parsed = msgspec.convert(item, tool.arguments)
    except msgspec.ValidationError as exc:
        return "invalid_arguments", str(exc)
    result: dict[str, Any] = msgspec.to_builtins(parsed)
    return result


def business_limits(
    tool: ToolDeclaration, item: dict[str, Any], recent_by_user: int
) -> Refusal | None:
    """Amount and frequency limits of the declaration."""
    limits = tool.business
    amount = item.get("amount_cents")
    if (
        limits.max_amount_cents is not None
        and isinstance(amount, int)
        and amount > limits.max_amount_cents
    ):
        return "over_limit", f"amount {amount} exceeds the limit of {limits.max_amount_cents}"
    if limits.max_per_user_per_hour is not None and recent_by_user >= limits.max_per_user_per_hour:
        return "over_limit", f"more than {limits.max_per_user_per_hour} {tool.name} per hour"
    return None


@dataclass(frozen=True, slots=True)
class Load:
    """Open operations of one tool, by scope."""

    global_open: int
    tenant_open: int
    user_open: int


def over_capacity(tool: ToolDeclaration, load: Load) -> str | None:
    """Which limit the tool's open operations exceed, if any."""
    limits = tool.limits
    if load.global_open >= limits.global_open:
        return f"{load.global_open} open {tool.name} operations (global limit {limits.global_open})"
    if load.tenant_open >= limits.per_tenant_open:
        return f"{load.tenant_open} open for the tenant (limit {limits.per_tenant_open})"
    if load.user_open >= limits.per_user_open:
        return f"{load.user_open} open for the user (limit {limits.per_user_open})"
    return None


def queue_has_room(tool: ToolDeclaration, load: Load) -> bool:
    """A queue as deep as the limit itself, then backpressure."""
    limits = tool.limits
    return (
        load.global_open < 2 * limits.global_open
        and load.tenant_open < 2 * limits.per_tenant_open
        and load.user_open < 2 * limits.per_user_open
    )
