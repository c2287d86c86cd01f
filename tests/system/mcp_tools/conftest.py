"""What the MCP-tools system tests share: the desk (an MCP server with its own ledger, run as
a process) and a tools file that imports its tools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.mcp_stack import http_file
from testkit.processes import ServiceProcess, free_port


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """The desk's process, not started: each module starts it when its story needs it
    (before the services, or once they run); stopped at the module's end."""
    logs = tmp_path_factory.mktemp("mcp_desk")
    port = free_port()
    server = ServiceProcess(
        "mcp_desk",
        {"MCP_DESK_PORT": str(port), "MCP_DESK_LEDGER": str(logs / "ledger.jsonl")},
        port,
        logs / "desk.log",
        module="testkit.mcp_desk",
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def desk_tools(desk: ServiceProcess, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tools file (`HOLDLINE_TOOLS_FILE`) importing the desk's tools over HTTP."""
    tools = tmp_path_factory.mktemp("mcp_tools") / "tools.toml"
    tools.write_text(http_file(f"{desk.base_url}/mcp"))
    return tools

