"""Tools for the Agent API tests (HOLDLINE_TOOL_MODULES): one only the billing agent may call."""

from __future__ import annotations

from demo.tools import AccessItem
from libs.tools import ToolDeclaration, ToolRegistry


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
