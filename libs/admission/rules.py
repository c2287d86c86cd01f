"""Pure admission rules: validation, authorisation, business limits, backpressure.

Each returns None when the item may proceed, or a (reason, detail) pair that becomes an
`operation.rejected` event. Nothing here touches the network or the clock, and nothing here
knows an argument by its name: what is checked comes from the tool's declared roles.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from libs.events import RejectReason
from libs.tools import Caller, ToolDeclaration, normalise_resource

Refusal = tuple[RejectReason, str]

_QUALIFIED = re.compile(r"^(?P<tenant>[A-Za-z0-9_.-]{1,64})[/:](?P<name>.+)$")
# What may follow a user id in a value that user owns ("ana:main", "ana/savings"): only
# characters a user (session) id cannot hold, so user `ana` does not own `ana-bob-7`, which
# may be the value of user `ana-bob`.
_OWNED_SEPARATORS = frozenset(":/")


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


def owns(caller: Caller, value: str, tool: ToolDeclaration) -> bool:
    """The caller's own: a declared shared value, the user id, or the id as a whole segment
    (the id, then `:` or `/`, then more)."""
    if value in tool.owned_values or value == caller.user_id:
        return True
    rest = value.removeprefix(caller.user_id)
    return rest != value and rest[:1] in _OWNED_SEPARATORS and len(rest) > 1


def _authorise_one(
    name: str, role: str, value: Any, caller: Caller, tool: ToolDeclaration
) -> Refusal | Any:
    """One value of a role-bearing argument: refused, or as admitted (tenant stripped)."""
    if not isinstance(value, str):
        return value
    match role:
        case "resource":
            match = _QUALIFIED.match(value.strip())
            if match:
                if match["tenant"] != caller.tenant_id:
                    return "forbidden", f"{name} {value!r} belongs to another tenant"
                return match["name"]
        case "owned":
            if not owns(caller, value.strip(), tool):
                return "forbidden", f"{name} {value!r} is not one of the user's own"
    return value


def authorise(
    tool: ToolDeclaration, item: dict[str, Any], caller: Caller
) -> Refusal | dict[str, Any]:
    """Enforce the declared roles: tenants' resources, the caller's own values, the hook.

    Returns the item with the caller's own tenant qualifiers stripped from resources.
    """
    cleaned = dict(item)
    for name, role in tool.roles.items():
        value = cleaned.get(name)
        # Missing, null or mistyped values are the schema's to refuse (with the precise
        # reason); a list (several resources or values at once) is checked value by value.
        values = value if isinstance(value, list) else [value]
        kept: list[Any] = []
        for one in values:
            checked = _authorise_one(name, role, one, caller, tool)
            if isinstance(checked, tuple):
                return checked
            kept.append(checked)
        if isinstance(value, list):
            cleaned[name] = kept
        elif isinstance(value, str):
            cleaned[name] = kept[0]
    if tool.authorise is not None:
        detail = tool.authorise(cleaned, caller)
        if detail:
            return "forbidden", detail
    return cleaned


def _normal(role: str, value: str) -> str:
    return normalise_resource(value) if role == "resource" else value.strip()


def normalise(tool: ToolDeclaration, item: dict[str, Any]) -> dict[str, Any]:
    """Canonical spelling per role and declared normaliser, so equal intents hash equally."""
    out = dict(item)
    for name, role in tool.roles.items():
        value = out.get(name)
        if isinstance(value, str):
            out[name] = _normal(role, value)
        elif isinstance(value, list):
            out[name] = [_normal(role, v) if isinstance(v, str) else v for v in value]
    for name, normaliser in tool.normalisers.items():
        if name in out:
            out[name] = normaliser(out[name])
    return out


def validate(tool: ToolDeclaration, item: dict[str, Any]) -> Refusal | dict[str, Any]:
    """Check types and ranges against the tool's schema; returns arguments with defaults."""
    try:
        parsed = msgspec.convert(item, tool.arguments)
    except msgspec.ValidationError as exc:
        return "invalid_arguments", str(exc)
    result: dict[str, Any] = msgspec.to_builtins(parsed)
    return result


def check_item(
    tool: ToolDeclaration, item: dict[str, Any], caller: Caller
) -> Refusal | dict[str, Any]:
    """Authorise, normalise and validate one item, in that order; its arguments as admitted.

    The order matters: a tenant-qualified resource ("acme/github") is only valid for the
    schema once authorisation has checked the tenant and stripped it.
    """
    checked = authorise(tool, item, caller)
    if isinstance(checked, tuple):
        return checked
    return validate(tool, normalise(tool, checked))


def business_limits(
    tool: ToolDeclaration, item: dict[str, Any], recent_by_user: int
) -> Refusal | None:
    """Amount and frequency limits of the declaration."""
    limits = tool.business
    for name, role in tool.roles.items():
        amount = item.get(name)
        if role != "amount" or not isinstance(amount, int):
            continue
        if amount <= 0:
            return "invalid_arguments", f"{name} must be a positive amount, not {amount}"
        if limits.max_amount is not None and amount > limits.max_amount:
            return "over_limit", f"{name} {amount} exceeds the limit of {limits.max_amount}"
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
