"""`tools/list` (pure): the tools the session's active agent may call, from the declarations.

The same definitions as the Agent API's `GET /tools?format=json-schema` (`agent/
tool_formats.py`), with `inputSchema`, plus the built-in `holdline_pending`. On a 2025-11-25
connection every tool also says `execution.taskSupport = "optional"` (but `holdline_pending`
and `confirm_operation`, which answer at once: absent, so forbidden; `legacy.py` serves the
tasks); on the modern protocol a call is tasked whenever the client advertises the tasks
extension.
"""

from __future__ import annotations

from typing import Any

from libs.tools import ToolRegistry

from ..agent.tool_formats import CONFIRM_TOOL, definitions, offered
from .tasks import PENDING_TOOL

TASK_SUPPORT_VERSIONS = frozenset({"2025-11-25"})
# Tools that answer at once, never as a task.
_UNTASKED = frozenset({PENDING_TOOL, CONFIRM_TOOL})

PENDING_SPEC: dict[str, Any] = {
    "name": PENDING_TOOL,
    "description": (
        "Fetch the results of earlier tool calls that finished since (holdline's pending "
        "updates), and mark them as passed on. Call it when the user asks how their "
        "requests went."
    ),
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
}


def listed(registry: ToolRegistry, agent: str, protocol_version: str) -> list[dict[str, Any]]:
    """The MCP `Tool` objects for the agent, on this protocol version."""
    specs = [*definitions(offered(registry, agent), "json-schema"), PENDING_SPEC]
    tools: list[dict[str, Any]] = []
    for spec in specs:
        tool: dict[str, Any] = {
            "name": spec["name"],
            "description": spec["description"],
            "inputSchema": spec["parameters"],
        }
        if protocol_version in TASK_SUPPORT_VERSIONS and spec["name"] not in _UNTASKED:
            tool["execution"] = {"taskSupport": "optional"}
        tools.append(tool)
    return tools


def names(registry: ToolRegistry, agent: str) -> set[str]:
    """Every tool name a call may use (the listing's)."""
    return {t["name"] for t in listed(registry, agent, "")}
