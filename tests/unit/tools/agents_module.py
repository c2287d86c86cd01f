"""A user module declaring agents (for test_agents.py)."""

from __future__ import annotations

from libs.tools import AgentDeclaration, ToolRegistry


def register(registry: ToolRegistry) -> None:
    """Two agents; the surface's default (`concierge`) is not one of them."""
    registry.declare_agent(AgentDeclaration("billing"))
    registry.declare_agent(AgentDeclaration("sales"))
