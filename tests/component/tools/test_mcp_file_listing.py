"""A tools file checked against a real MCP server's `tools/list` at start (DESIGN §7c): the
schema comes from the server, and a role on an argument it lacks stops the worker (exit 78,
file, entry and field in the message)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from libs.tools import DeclarationError, ToolRegistry
from libs.tools.http_file import load_tools_file
from testkit.mcp_stack import stdio_file
from testkit.processes import ROOT


def test_the_schema_comes_from_the_server_and_a_wrong_role_stops_the_worker(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tools.toml"
    path.write_text(stdio_file(tmp_path / "ledger.jsonl", 1.0))
    registry = ToolRegistry()
    load_tools_file(str(path), registry, None)
    ticket = registry.tool("open_ticket")
    assert set(ticket.arguments.__struct_fields__) == {"customer", "subject"}
    assert ticket.description == "Open a support ticket for a customer."
    assert registry.unavailable("open_ticket") is None

    path.write_text(path.read_text().replace("customer = ", "client = ", 1))
    with pytest.raises(DeclarationError) as refused:
        load_tools_file(str(path), ToolRegistry(), None)
    where = f"{path}: mcp_servers[0] ('desk').tools[0] ('open_ticket'): roles.client"
    assert where in str(refused.value)

    done = subprocess.run(
        [sys.executable, "-m", "services.operation_worker"],
        cwd=ROOT,
        env={
            "PATH": "/usr/bin:/bin",
            "HOLDLINE_TOOLS_FILE": str(path),
            "NATS_URL": "nats://127.0.0.1:9",
        },
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 78
    assert "Traceback" not in done.stderr
    assert f"operation-worker: refusing to start: {where}" in done.stderr
