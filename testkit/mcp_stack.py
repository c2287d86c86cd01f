"""An MCP server (`testkit.mcp_desk`) beside a real operation plane, for the MCP tools tests.

`McpStack.http(...)` serves the desk over Streamable HTTP on a free port (a subprocess the
stack owns, restartable); `McpStack.stdio(...)` lets the worker start it over stdio. Either
way the tools file imports the desk's tools, the worker runs them, and the test admits
through the same `Admission` the surface uses, with a registry built from the same file.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from libs.admission import TurnAdmission
from libs.config import BusSettings, ToolSettings
from testkit.mcp_desk import read_ledger
from testkit.ops_stack import OpsStack
from testkit.processes import ServiceProcess, free_port

# The desk's tools as a team imports them: roles, a closing, the lookup tool, a task.
TOOLS = """
[[mcp_servers.tools]]
name = "open_ticket"
roles = { customer = "resource", subject = "text" }
closing = "Ticket {result.id} is open."
attempt_timeout_s = 10
lookup = { tool = "find_ticket_by_key", key_argument = "key" }

[[mcp_servers.tools]]
name = "add_note"
roles = { customer = "resource", text = "text" }
attempt_timeout_s = 10

[[mcp_servers.tools]]
name = "export_history"
roles = { customer = "resource" }
cancellable = true
attempt_timeout_s = 10
"""


def http_file(url: str) -> str:
    """A tools file importing the desk served at `url`."""
    return f'[[mcp_servers]]\nname = "desk"\nurl = "{url}"\n{TOOLS}'


def stdio_file(ledger: Path, task_s: float) -> str:
    """A tools file importing the desk started over stdio, writing to `ledger` (without the
    tasks extension: the stdio tests restart the server, and it starts faster without)."""
    return (
        '[[mcp_servers]]\nname = "desk"\n'
        f'command = "{sys.executable}"\nargs = ["-m", "testkit.mcp_desk"]\n'
        f'env = {{ MCP_DESK_LEDGER = "{ledger}", MCP_DESK_TASK_S = "{task_s}", '
        f'MCP_DESK_TASKS = "0" }}\n{TOOLS}'
    )


@dataclass
class McpStack:
    """The operation plane, the tools file and (over HTTP) the MCP server process."""

    ops: OpsStack
    ledger: Path
    server: ServiceProcess | None = None
    started: list[ServiceProcess] = field(default_factory=list)

    def effects(self, kind: str, key: str | None = None) -> list[dict[str, Any]]:
        """The server's own ledger lines of one kind (for one idempotency key)."""
        return [
            e for e in read_ledger(self.ledger)
            if e["kind"] == kind and (key is None or e.get("key") == key)
        ]

    async def admit(self, tool: str, arguments: dict[str, Any]) -> tuple[str, TurnAdmission]:
        """One turn of a new session asking for one tool call: the session and the answer."""
        ctx = self.ops.turn()
        return ctx.session_id, await self.ops.admit(ctx, (tool, arguments))

    async def start_server(self) -> None:
        """(Re)start the HTTP server on its port."""
        assert self.server is not None
        await asyncio.to_thread(self.server.start)

    async def stop(self) -> None:
        """Stop the plane and the server."""
        await self.ops.stop()
        if self.server is not None:
            await asyncio.to_thread(self.server.stop)


async def mcp_stack(
    bus_settings: BusSettings,
    logs: Path,
    *,
    transport: str = "http",
    server_up: bool = True,
    task_s: float = 3.0,
    workers: int = 1,
) -> McpStack:
    """Start the MCP server (HTTP, unless `server_up` is false) and the workers."""
    ledger = logs / "mcp-desk-ledger.jsonl"
    server = None
    if transport == "http":
        port = free_port()
        server = ServiceProcess(
            "mcp_desk",
            {
                "MCP_DESK_PORT": str(port),
                "MCP_DESK_LEDGER": str(ledger),
                "MCP_DESK_TASK_S": str(task_s),
            },
            port,
            logs / "mcp-desk.log",
            module="testkit.mcp_desk",
        )
        text = http_file(f"{server.base_url}/mcp")
    else:
        text = stdio_file(ledger, task_s)
    tools_file = logs / "tools.toml"
    tools_file.write_text(text)
    tools = ToolSettings(tools_file=str(tools_file))
    ops = OpsStack(
        settings=bus_settings,
        logs=logs,
        worker_env={"HOLDLINE_TOOLS_FILE": str(tools_file)},
        tools=tools,
    )
    stack = McpStack(ops, ledger, server)
    if server is not None and server_up:
        await stack.start_server()
    await ops.start(workers=workers, provider=False)
    return stack
