"""Declared agents: which tenants may use each, and which agents it may hand off to.

A user's module declares agents beside its tools (`registry.declare_agent(...)` in its
`register`). With no agent declared the set is open, as before declarations existed: any
agent name is accepted. Once one is declared the set is closed: an undeclared agent is
`unknown agent` (404), one the tenant may not use or the active agent may not hand off to
is `agent not allowed` (403), at session creation and at handoff alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AgentDeclaration:
    """One agent a session may run."""

    name: str
    # Tenants that may use the agent; None means every tenant.
    tenants: frozenset[str] | None = None
    # Agents it may hand a session off to; None means any declared agent.
    handoff_to: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class AgentRefusal:
    """Why an agent cannot be used: an HTTP status and a short reason."""

    status: int
    reason: str


UNKNOWN = AgentRefusal(404, "unknown agent")
NOT_ALLOWED = AgentRefusal(403, "agent not allowed")


def agent_refusal(
    declared: Mapping[str, AgentDeclaration],
    tenant_id: str,
    agent: str,
    from_agent: str | None = None,
) -> AgentRefusal | None:
    """None when `tenant_id` may run `agent` (handed off from `from_agent` when given)."""
    if not declared:
        return None
    target = declared.get(agent)
    if target is None:
        return UNKNOWN
    if target.tenants is not None and tenant_id not in target.tenants:
        return NOT_ALLOWED
    if from_agent is not None:
        source = declared.get(from_agent)
        # A session whose agent is no longer declared may still leave it for a declared one.
        if source is not None and source.handoff_to is not None and agent not in source.handoff_to:
            return NOT_ALLOWED
    return None
