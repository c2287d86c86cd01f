"""MCP tools through the whole system (DESIGN §7c): every service as a process, an MCP server
(FastMCP, its own ledger) that is down when they start. Its tools are refused on the Agent
API with the reason, recorded as `operation.rejected`; once it answers they are admitted,
run once, and the batch gets one closing in the tool's own words."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from holdline.client import HoldlineClient, ToolCall
from testkit.mcp_desk import read_ledger
from testkit.processes import Broker, ServiceProcess
from testkit.surface import SurfaceStack, eventually, running_stack


@pytest.fixture(scope="module")
def stack(
    broker: Broker, desk_tools: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SurfaceStack]:
    """Every service as a process, importing the desk's tools from a file; the desk (its
    process: conftest.py) is down when they start."""
    logs = tmp_path_factory.mktemp("mcp_stack")
    env = {"HOLDLINE_TOOLS_FILE": str(desk_tools)}
    with running_stack(broker.url, logs, "mcp", env=env) as running:
        yield running


def _effects(desk: ServiceProcess, key: str) -> list[dict[str, Any]]:
    return [e for e in read_ledger(Path(desk.env["MCP_DESK_LEDGER"])) if e.get("key") == key]


@pytest.mark.timeout(180)
async def test_a_server_down_at_start_is_refused_on_the_agent_api_then_runs_once(
    stack: SurfaceStack, desk: ServiceProcess
) -> None:
    async with HoldlineClient(stack.url, timeout_s=20.0) as hl:
        user = f"u-{uuid.uuid4().hex[:8]}"
        s = await hl.create_session(user_id=user, tenant_id="acme")
        # Listed, and marked unavailable with the reason.
        listing = await hl.request("GET", f"/v1/sessions/{s.session_id}/tools", token=s.token)
        names = [t["function"]["name"] for t in listing["tools"]]
        assert "open_ticket" in names
        assert "MCP server 'desk'" in listing["unavailable"]["open_ticket"]
        arguments = {"customer": "acme-ana", "subject": "Login fails"}
        answer = await s.tool_calls(
            [ToolCall(tool_call_id="t1", name="open_ticket", arguments=arguments)]
        )
        [result] = answer.results
        [refused] = result.operations
        assert refused.status == "rejected"
        timeline = await s.timeline()
        rejected = [
            e for e in timeline["events"]
            if e["type"] == "operation.rejected" and e.get("operation_id") == refused.operation_id
        ]
        assert [e["data"]["reason"] for e in rejected] == ["tool_unavailable"]
        assert "MCP server 'desk'" in rejected[0]["data"]["detail"]
        await asyncio.to_thread(desk.start)
        calls = iter(range(2, 200))

        async def admitted() -> Any:
            tried = await s.tool_calls(
                [ToolCall(tool_call_id=f"t{next(calls)}", name="open_ticket", arguments=arguments)]
            )
            [ref] = tried.results[0].operations
            return (tried.batch_id, ref.operation_id) if ref.status != "rejected" else None

        batch_id, op = await eventually(admitted, timeout_s=30.0, every_s=0.5)

        async def closed() -> dict[str, Any] | None:
            snap = await s.snapshot()
            statuses = {o["operation_id"]: o["status"] for o in snap["operations"]}
            finals = [
                d for d in snap["deliveries"] if d["batch_id"] == batch_id and d["kind"] == "final"
            ]
            return snap if finals and statuses.get(op) == "committed" else None

        snap = await eventually(closed, timeout_s=30.0)
        listing = await hl.request("GET", f"/v1/sessions/{s.session_id}/tools", token=s.token)
        assert listing["unavailable"] == {}
        assert len(_effects(desk, op)) == 1
        # One closing for the batch, in the tool's own words (no channel is attached, so it
        # waits for the session's next turn).
        finals = [
            d for d in snap["deliveries"] if d["batch_id"] == batch_id and d["kind"] == "final"
        ]
        assert len(finals) == 1
        assert "Ticket T-1 is open." in finals[0]["text"], finals
        # The refused call's closing gave the reason.
        refused_final = [
            d for d in snap["deliveries"]
            if d["batch_id"] == answer.batch_id and d["kind"] == "final"
        ]
        assert "is unavailable" in refused_final[0]["text"], refused_final
