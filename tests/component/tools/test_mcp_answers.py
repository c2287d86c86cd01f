"""What `McpExecutor` makes of a real server's answers (DESIGN §7c), without the plane: an
error result, arguments the server's schema rejects and an oversized result are final
failures with the server's reason; nothing reachable is retryable; a lookup finds the
effect by key or says it is absent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libs.tools import OperationCall
from libs.tools.mcp_executor import McpExecutor, McpLookup
from libs.tools.mcp_sessions import McpConnection, McpServerSpec, list_now
from testkit.processes import ServiceProcess, free_port


def _call(key: str, tool: str, arguments: dict[str, object]) -> OperationCall:
    return OperationCall(
        operation_id=key, session_id="s_1", tool=tool, arguments=arguments,
        tenant_id="acme", user_id="ana", idempotency_key=key, reference=f"s_1/{key}",
    )


@pytest.fixture
async def desk(tmp_path: Path) -> AsyncIterator[McpConnection]:
    """The test desk over Streamable HTTP, and a worker-style session to it."""
    port = free_port()
    server = ServiceProcess(
        "mcp_desk",
        {"MCP_DESK_PORT": str(port), "MCP_DESK_LEDGER": str(tmp_path / "ledger.jsonl"),
         "MCP_DESK_TASKS": "0"},
        port,
        tmp_path / "desk.log",
        module="testkit.mcp_desk",
    )
    await asyncio.to_thread(server.start)
    connection = McpConnection(McpServerSpec(name="desk", url=f"{server.base_url}/mcp"))
    try:
        yield connection
    finally:
        await connection.aclose()
        await asyncio.to_thread(server.stop)


async def test_answers_are_classified_as_the_contract_says(desk: McpConnection) -> None:
    close = McpExecutor(desk, "close_ticket")
    refused = await close.execute(_call("k1", "close_ticket", {"ticket": "T-9"}), timeout_s=5)
    assert refused.outcome == "business_error"
    assert "no ticket T-9" in refused.detail

    # The server's schema changed under us: it rejects the arguments, nothing happened.
    stale = await close.execute(_call("k2", "close_ticket", {"number": 9}), timeout_s=5)
    assert stale.outcome == "business_error"
    assert "ticket" in stale.detail

    big = McpExecutor(desk, "big_report", max_result_bytes=1000)
    oversized = await big.execute(_call("k3", "big_report", {"size": 5000}), timeout_s=5)
    assert oversized.outcome == "business_error"
    assert "larger than 1000" in oversized.detail
    fits = await big.execute(_call("k4", "big_report", {"size": 10}), timeout_s=5)
    assert (fits.outcome, fits.result) == ("success", {"report": "x" * 10})

    garbage = await McpExecutor(desk, "garbled").execute(_call("k7", "garbled", {}), timeout_s=5)
    assert garbage.outcome == "business_error"
    assert "unreadable answer" in garbage.detail

    tickets = McpExecutor(desk, "open_ticket", lookup=McpLookup("find_ticket_by_key", "key"))
    opened = await tickets.execute(
        _call("k5", "open_ticket", {"customer": "ana", "subject": "Hi"}), timeout_s=5
    )
    assert opened.outcome == "success"
    found = await tickets.lookup(_call("k5", "open_ticket", {}), timeout_s=5)
    assert (found.state, found.result["id"]) == ("committed", opened.result["id"])
    absent = await tickets.lookup(_call("k6", "open_ticket", {}), timeout_s=5)
    assert absent.state == "absent"


async def test_a_server_that_cannot_be_reached_is_retryable_and_listed_down() -> None:
    spec = McpServerSpec(name="nobody", url=f"http://127.0.0.1:{free_port()}/mcp")
    down = await asyncio.to_thread(list_now, spec, timeout_s=3)
    assert isinstance(down, str)
    connection = McpConnection(spec, down=down)
    try:
        executor = McpExecutor(connection, "open_ticket")
        tried = await executor.execute(
            _call("k1", "open_ticket", {"customer": "ana", "subject": "Hi"}), timeout_s=1
        )
        assert tried.outcome == "connect_error"
        reason = connection.unavailable()
        assert reason is not None
        assert "MCP server 'nobody'" in reason
    finally:
        await connection.aclose()
