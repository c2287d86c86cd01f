"""An imported MCP tool called from a chat turn (the demo's scripted model beside a tools
file): the turn is answered with an honest acceptance, the desk's ledger holds one ticket
for the intent even when the turn is said twice, and the batch has one closing in the tool's
own words."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from testkit.mcp_desk import read_ledger
from testkit.processes import Broker, ServiceProcess
from testkit.surface import SurfaceStack, eventually, open_chat, running_stack


@pytest.fixture(scope="module")
def stack(
    broker: Broker, desk: ServiceProcess, desk_tools: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[SurfaceStack]:
    """The desk up first (its process: conftest.py), then every service as a process in
    demo mode (the scripted model), with the desk's tools."""
    desk.start()
    logs = tmp_path_factory.mktemp("mcp_chat_stack")
    env = {"HOLDLINE_TOOLS_FILE": str(desk_tools), "HOLDLINE_DEMO": "1"}
    with running_stack(broker.url, logs, "mcpchat", env=env) as running:
        yield running


def _tickets(desk: ServiceProcess, customer: str) -> list[dict[str, Any]]:
    ledger = Path(desk.env["MCP_DESK_LEDGER"])
    return [e for e in read_ledger(ledger) if e["kind"] == "ticket" and e["customer"] == customer]


@pytest.mark.timeout(120)
async def test_a_chat_turn_calls_the_mcp_tool_once_per_intent(
    stack: SurfaceStack, desk: ServiceProcess
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        chat = await open_chat(client, user=user)
        said = f"call open_ticket with customer={user}, subject=Printer jam"
        first = await chat.say(said)
        [op] = [o for o in first["operations"] if o["tool"] == "open_ticket"]
        # Accepted, never claimed as done in the turn's own reply.
        assert "Ticket T-" not in first["reply"]["text"], first
        # Said again: the same intent, the same operation.
        again = await chat.say(said)
        assert [o["operation_id"] for o in again["operations"] if o["tool"] == "open_ticket"] in (
            [], [op["operation_id"]],
        )

        async def closed() -> dict[str, Any] | None:
            snap = await chat.snapshot()
            finals = [
                d for d in snap["deliveries"]
                if d["batch_id"] == op["batch_id"] and d["kind"] == "final"
            ]
            statuses = {o["operation_id"]: o["status"] for o in snap["operations"]}
            return snap if finals and statuses.get(op["operation_id"]) == "committed" else None

        snap = await eventually(closed, timeout_s=40.0)
    tickets = _tickets(desk, user)
    assert len(tickets) == 1, tickets
    assert tickets[0]["key"] == op["operation_id"]
    finals = [
        d for d in snap["deliveries"] if d["batch_id"] == op["batch_id"] and d["kind"] == "final"
    ]
    assert len(finals) == 1
    assert f"Ticket {tickets[0]['id']} is open." in finals[0]["text"], finals
    assert [o["operation_id"] for o in snap["operations"] if o["tool"] == "open_ticket"] == [
        op["operation_id"]
    ]
