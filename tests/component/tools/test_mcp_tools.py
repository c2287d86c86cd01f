"""MCP servers as tool sources run each call at most once (DESIGN §7c).

Real broker, a real worker, and a real MCP server built with FastMCP (`testkit.mcp_desk`)
over Streamable HTTP and over stdio; the server's own ledger counts the effects per
idempotency key (the operation id), whatever happened to the answers.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from libs.config import BusSettings
from libs.events import OperationCommitted, OperationProgress
from libs.models.phrasing import reason_words
from testkit.mcp_stack import McpStack, mcp_stack
from testkit.ops_stack import types
from testkit.surface import eventually

Factory = Callable[..., Awaitable[McpStack]]


@pytest.fixture
async def stacks(bus_settings: BusSettings, tmp_path: Path) -> AsyncIterator[Factory]:
    """Start MCP stacks on demand; all stopped after the test."""
    started: list[McpStack] = []

    async def factory(**options: object) -> McpStack:
        logs = tmp_path / f"mcp{len(started)}"
        logs.mkdir()
        stack = await mcp_stack(bus_settings, logs, **options)  # type: ignore[arg-type]
        started.append(stack)
        return stack

    yield factory
    for stack in started:
        await stack.stop()


async def _admitted(stack: McpStack, tool: str, arguments: dict[str, object]) -> tuple[str, str]:
    session, turn = await stack.admit(tool, arguments)
    outcome = turn.outcomes[0]
    assert outcome.status == "admitted", outcome
    return session, outcome.operation_id


async def test_http_calls_commit_once_and_a_lost_answer_is_never_resent(stacks: Factory) -> None:
    stack = await stacks()
    assert stack.ops.admission is not None
    # One call: one effect, its result the server's, the closing from the file.
    session, op = await _admitted(stack, "open_ticket", {"customer": "ana", "subject": "Login"})
    state = await stack.ops.wait_status(session, op, "committed")
    assert state.result is not None
    assert state.result["id"] == "T-1"
    assert len(stack.effects("ticket", op)) == 1
    registry = stack.ops.admission._registry
    closing = registry.tool("open_ticket").closing
    assert closing is not None
    assert closing(state.arguments, state.result) == "Ticket T-1 is open."

    # The server commits, then its answer never comes: UNKNOWN, reconciled through the
    # lookup tool, never sent again.
    session, op = await _admitted(
        stack, "open_ticket", {"customer": "ana", "subject": "lose-answer"}
    )
    state = await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    _, events = await stack.ops.operation(session, op)
    kinds = types(events)
    assert kinds.index("operation.unknown") < kinds.index("operation.committed")
    assert kinds.count("operation.started") == 1
    committed = events[-1].event
    assert isinstance(committed, OperationCommitted)
    assert committed.via == "reconcile"
    assert state.result is not None
    assert state.result["key"] == op
    assert len(stack.effects("ticket", op)) == 1

    # Without a lookup tool: failed for good as `unknown_outcome`, one effect, not re-sent.
    session, op = await _admitted(stack, "add_note", {"customer": "ana", "text": "lose-answer"})
    state = await stack.ops.wait_status(session, op, "failed_final", timeout_s=30)
    assert state.failure is not None
    assert state.failure.startswith("unknown_outcome")
    _, events = await stack.ops.operation(session, op)
    assert types(events).count("operation.started") == 1
    assert len(stack.effects("note", op)) == 1
    # The closing says the outcome is unknown, not that it failed.
    words = reason_words(state.failure, "failed_final", "en")
    assert "cannot tell whether it went through" in words
    assert "did not send it again" in words

    # Roles first: another tenant's customer is refused before any call reaches the server.
    before = len(stack.effects("ticket"))
    _, turn = await stack.admit("open_ticket", {"customer": "globex/bob", "subject": "Hi"})
    assert turn.outcomes[0].status == "rejected"
    assert turn.outcomes[0].reason == "forbidden"
    assert len(stack.effects("ticket")) == before


async def test_a_task_reports_progress_commits_once_across_a_worker_kill_and_cancels(
    stacks: Factory,
) -> None:
    stack = await stacks(task_s=3.0)
    session, op = await _admitted(stack, "export_history", {"customer": "ana"})
    state = await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    assert state.result == {"customer": "ana", "parts": 3}
    _, events = await stack.ops.operation(session, op)
    progress = [e.event.message for e in events if isinstance(e.event, OperationProgress)]
    assert any("of 3 parts" in p for p in progress), progress
    assert [a for a in types(events) if a == "operation.attempted"] == ["operation.attempted"]
    assert len(stack.effects("export")) == 1

    # A running task cancelled: `tasks/cancel` reaches the server, the operation is cancelled.
    ctx = stack.ops.turn()
    turn = await stack.ops.admit(ctx, ("export_history", {"customer": "bob"}))
    op = turn.outcomes[0].operation_id
    await stack.ops.wait_async_pending(ctx.session_id, op)
    assert stack.ops.admission is not None
    asked = await stack.ops.admission.request_cancel(ctx, op, reason="not needed")
    assert asked.status == "cancel_requested"
    await stack.ops.wait_status(ctx.session_id, op, "cancelled", timeout_s=20)

    async def cancel_seen() -> bool:
        return bool(stack.effects("cancel_seen"))

    await eventually(cancel_seen)
    assert [e["customer"] for e in stack.effects("export")] == ["ana"]

    # kill -9 of the worker while the task runs: a new worker polls the same task, 1 effect.
    session, op = await _admitted(stack, "export_history", {"customer": "cleo"})
    await stack.ops.wait_async_pending(session, op)
    doomed = stack.ops.workers[0]
    assert doomed.proc is not None
    doomed.proc.send_signal(signal.SIGKILL)
    await asyncio.to_thread(doomed.proc.wait, 15)
    await stack.ops.add_worker(callback=True)
    state = await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    assert state.result == {"customer": "cleo", "parts": 3}
    _, events = await stack.ops.operation(session, op)
    assert types(events).count("operation.started") == 1
    assert [e["customer"] for e in stack.effects("export")] == ["ana", "cleo"]


async def test_a_killed_stdio_server_is_restarted_and_reconciled(stacks: Factory) -> None:
    stack = await stacks(transport="stdio")
    session, op = await _admitted(stack, "open_ticket", {"customer": "ana", "subject": "First"})
    await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    first_pid = stack.effects("ticket", op)[0]["pid"]

    # The server commits and dies before answering: restarted by the worker, the lost answer
    # reconciled through the lookup tool of the new process, one effect.
    session, op = await _admitted(
        stack, "open_ticket", {"customer": "ana", "subject": "crash-after-commit"}
    )
    state = await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    assert state.result is not None
    assert state.result["key"] == op
    assert len(stack.effects("ticket", op)) == 1
    _, events = await stack.ops.operation(session, op)
    assert types(events).count("operation.started") == 1

    # The call after the crash ran in a new server process.
    session, op = await _admitted(stack, "open_ticket", {"customer": "ana", "subject": "Second"})
    await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    second_pid = stack.effects("ticket", op)[0]["pid"]
    assert second_pid != first_pid

    # kill -9 of the server: restarted, later calls work.
    os.kill(int(second_pid), signal.SIGKILL)
    await asyncio.sleep(0.5)
    session, op = await _admitted(stack, "open_ticket", {"customer": "ana", "subject": "Later"})
    await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    later = stack.effects("ticket", op)
    assert len(later) == 1
    assert later[0]["pid"] not in (first_pid, second_pid)


async def test_a_server_down_at_start_is_refused_with_the_reason_then_admitted(
    stacks: Factory,
) -> None:
    stack = await stacks(server_up=False)
    _, turn = await stack.admit("open_ticket", {"customer": "ana", "subject": "Hello"})
    refused = turn.outcomes[0]
    assert refused.status == "rejected"
    assert refused.reason == "tool_unavailable"
    assert "MCP server 'desk'" in refused.detail
    assert "unavailable" in refused.detail
    assert stack.effects("ticket") == []

    await stack.start_server()

    async def admitted() -> tuple[str, str] | None:
        session, turn = await stack.admit("open_ticket", {"customer": "ana", "subject": "Hello"})
        outcome = turn.outcomes[0]
        return (session, outcome.operation_id) if outcome.status == "admitted" else None

    session, op = await eventually(admitted, timeout_s=20)
    await stack.ops.wait_status(session, op, "committed", timeout_s=30)
    assert len(stack.effects("ticket", op)) == 1


async def test_a_worker_killed_after_the_server_committed_never_resends(stacks: Factory) -> None:
    stack = await stacks(workers=0)
    crash = {"HOLDLINE_CRASH_POINTS": "worker.after_provider_commit"}
    # No lookup tool: the call may have happened, so it ends `unknown_outcome`, not re-sent.
    doomed = await stack.ops.add_worker(env=crash)
    note_session, note = await _admitted(stack, "add_note", {"customer": "ana", "text": "Hi"})
    assert doomed.proc is not None
    await asyncio.to_thread(doomed.proc.wait, 30)
    assert len(stack.effects("note", note)) == 1
    # With a lookup tool: reconciled from the server's own record.
    doomed = await stack.ops.add_worker(env=crash)
    ticket_session, ticket = await _admitted(
        stack, "open_ticket", {"customer": "ana", "subject": "Crash"}
    )
    assert doomed.proc is not None
    await asyncio.to_thread(doomed.proc.wait, 30)
    await stack.ops.add_worker(callback=True)

    state = await stack.ops.wait_status(note_session, note, "failed_final", timeout_s=30)
    assert state.failure is not None
    assert state.failure.startswith("unknown_outcome")
    state = await stack.ops.wait_status(ticket_session, ticket, "committed", timeout_s=30)
    assert state.result is not None
    assert state.result["key"] == ticket
    for session, op, kind in ((note_session, note, "note"), (ticket_session, ticket, "ticket")):
        _, events = await stack.ops.operation(session, op)
        assert types(events).count("operation.started") == 1
        assert "operation.unknown" in types(events)
        assert len(stack.effects(kind, op)) == 1
