"""The access suite's declared agents (`HOLDLINE_TOOL_MODULES`): the set is closed."""

from __future__ import annotations

from libs.tools import AgentDeclaration, ToolRegistry


def register(registry: ToolRegistry) -> None:
    """`concierge` may hand off only to `billing`; `vip` is acme's alone."""
    registry.declare_agent(AgentDeclaration("concierge", handoff_to=frozenset({"billing"})))
    registry.declare_agent(AgentDeclaration("billing"))
    registry.declare_agent(AgentDeclaration("vip", tenants=frozenset({"acme"})))
