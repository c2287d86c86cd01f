"""Tools for the Agent API tests (HOLDLINE_TOOL_MODULES): one only the billing agent may call."""

from __future__ import annotations

from libs.tools import ToolDeclaration, ToolRegistry
from libs.tools.demo import AccessItem


def register(registry: ToolRegistry) -> None:
    """Declare the test tools."""
    registry.declare(
        ToolDeclaration(
            name="billing_access",
            description="Grant access to a billing workspace (billing agent only).",
            arguments=AccessItem,
            executor="sandbox.access",
            roles={"access": "resource"},
            agents=frozenset({"billing"}),
        )
    )
