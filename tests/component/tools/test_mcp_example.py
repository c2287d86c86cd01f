"""The example (`examples/mcp_tools`): its server, imported by its tools file, commits one
effect per intent through a real worker, and its closing reads right."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from libs.config import BusSettings, ToolSettings
from libs.tools.mcp_sessions import McpServerSpec, list_now
from testkit.ops_stack import OpsStack
from testkit.processes import ROOT, ServiceProcess, free_port

TOOLS_FILE = ROOT / "examples" / "mcp_tools" / "tools.toml"


async def test_the_example_desk_commits_once_per_intent(
    bus_settings: BusSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    ledger = tmp_path / "ledger.jsonl"
    url = f"http://127.0.0.1:{port}/mcp"
    server = ServiceProcess(
        "mcp_tools_example",
        {"MCP_DESK_PORT": str(port), "MCP_DESK_LEDGER": str(ledger)},
        port,
        tmp_path / "server.log",
        module="examples.mcp_tools",
    )
    server.start(wait_ready=False)
    ops = OpsStack(
        settings=bus_settings,
        logs=tmp_path,
        worker_env={"HOLDLINE_TOOLS_FILE": str(TOOLS_FILE), "MCP_DESK_URL": url},
        tools=ToolSettings(tools_file=str(TOOLS_FILE)),
    )
    try:
        spec = McpServerSpec(name="desk", url=url)
        for _ in range(60):
            if isinstance(await asyncio.to_thread(list_now, spec, timeout_s=2.0), dict):
                break
            await asyncio.sleep(0.25)
        monkeypatch.setenv("MCP_DESK_URL", url)
        await ops.start(workers=1, provider=False)
        ctx = ops.turn()
        turn = await ops.admit(
            ctx,
            ("open_ticket", {"customer": "ana", "subject": "Login fails"}),
            ("open_ticket", {"customer": "ana", "subject": "Login fails"}),
            ("open_ticket", {"customer": "bob", "subject": "Not mine"}),
        )
        first, repeat, foreign = turn.outcomes
        assert first.status == "admitted"
        # The same intent twice in one turn is one operation.
        assert repeat.operation_id == first.operation_id
        assert foreign.status == "rejected"
        assert foreign.reason == "forbidden"
        state = await ops.wait_status(ctx.session_id, first.operation_id, "committed")
        lines = [json.loads(line) for line in ledger.read_text().splitlines()]
        assert [e["key"] for e in lines] == [first.operation_id]
        assert ops.admission is not None
        closing = ops.admission._registry.tool("open_ticket").closing
        assert closing is not None
        assert state.result is not None
        assert closing(state.arguments, state.result) == "Ticket T-1 is open."
    finally:
        await ops.stop()
        await asyncio.to_thread(server.stop)
