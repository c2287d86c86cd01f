"""holdline over MCP with tasks, end to end: real broker and services, the `mcp` SDK's client
and FastMCP's client (with fastmcp-tasks) over real HTTP; the provider's ledger counts the
real effects."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from fastmcp_tasks import call_tool_task
from mcp.shared.exceptions import MCPError

from testkit.surface import SurfaceStack, effects, fault, unique

from .clients import (
    DAY,
    bearer,
    fast_client,
    headers_for,
    open_session,
    sdk_call_task,
    sdk_tasks_client,
    sdk_until,
    settled_timeline,
    user,
)


async def test_a_call_is_a_task_at_once_and_completes_with_a_closing_naming_every_member(
    stack: SurfaceStack,
) -> None:
    fast, slow = unique("github"), unique("jira")
    await fault(stack, match=slow, latency_ms=1500, times=1)
    session = await open_session(stack)
    async with sdk_tasks_client(stack.url, bearer(session)) as client:
        started = time.perf_counter()
        created = await sdk_call_task(client, "provision_access", {"accesses": [fast, slow]})
        took = time.perf_counter() - started
        assert created.result_type == "task"
        assert took < 1.0, f"the task took {took:.3f} s to be created"
        first = await sdk_until(client, created.task_id, "working", "completed")
        assert first.status == "working", "answered before the provider's 1.5 s were over"
        assert first.status_message
        done = await sdk_until(client, created.task_id, "completed")
    assert done.result is not None
    [content] = done.result["content"]
    assert fast in content["text"], content
    assert slow in content["text"], content
    structured = done.result["structuredContent"]
    assert {f["status"] for f in structured["facts"]} == {"committed"}
    assert done.result["isError"] is False
    assert await effects(stack, fast) == 1
    assert await effects(stack, slow) == 1
    # The result handed out is the batch's one delivery, on channel mcp, delivered.
    events = await settled_timeline(stack, session)
    sent = [e for e in events if e["type"] == "delivery.sent"]
    assert [e["batch_id"] for e in sent] == [structured["batch_id"]]
    assert [e["data"]["channel"] for e in sent] == ["mcp"]
    assert [e["type"] for e in events if e["type"] == "delivery.delivered"] == [
        "delivery.delivered"
    ]


async def test_fastmcp_completes_a_task_and_a_reissued_call_joins_it(
    stack: SurfaceStack,
) -> None:
    access = unique("figma")
    await fault(stack, match=access, latency_ms=1200, times=1)
    headers = headers_for(user())
    async with fast_client(stack.url, headers) as client:
        task = await call_tool_task(client, "provision_access", {"accesses": [access]})
        first_id = task.task_id
        assert (await task.status()).status == "working"
    # The client dropped its stream; a new connection re-issues the same call.
    async with fast_client(stack.url, headers) as client:
        again = await call_tool_task(client, "provision_access", {"accesses": [access]})
        assert again.task_id == first_id
        result = await again.result()
        assert access in result.content[0].text  # type: ignore[union-attr]
        # And FastMCP's transparent path drives the same task to the same result.
        plain = await client.call_tool("provision_access", {"accesses": [access]})
        assert plain.content[0].text == result.content[0].text  # type: ignore[union-attr]
    assert await effects(stack, access) == 1


async def _confirm_with(stack: SurfaceStack, answer: bool) -> tuple[str, Any]:
    account = unique("acct")
    asked: list[str] = []

    async def elicit(message: str, _type: Any, _params: Any, _ctx: Any) -> dict[str, Any]:
        # FastMCP's elicitation handler: the user's answer as the requested form's content.
        asked.append(message)
        return {"confirmed": answer}

    async with fast_client(
        stack.url, headers_for(user()), elicitation_handler=elicit
    ) as client:
        task = await call_tool_task(
            client, "transfer_money", {"to_account": account, "amount_cents": 1200},
            raise_on_error=False,
        )
        waiting = await task.wait(state="input_required", timeout=20)
        assert waiting.input_requests, waiting
        [request] = waiting.input_requests.values()
        schema = request["params"]["requestedSchema"]
        assert schema["properties"]["confirmed"]["type"] == "boolean"
        result = await task.result()
    assert asked, "the elicitation was never asked"
    return account, result


async def test_confirmation_yes_is_exactly_one_effect(stack: SurfaceStack) -> None:
    account, result = await _confirm_with(stack, True)
    facts = result.structured_content["facts"]
    assert [f["status"] for f in facts] == ["committed"]
    assert await effects(stack, account) == 1


async def test_confirmation_no_is_no_effect(stack: SurfaceStack) -> None:
    account, result = await _confirm_with(stack, False)
    facts = result.structured_content["facts"]
    assert [f["status"] for f in facts] == ["rejected"]
    assert result.is_error
    await asyncio.sleep(0.5)
    assert await effects(stack, account) == 0


async def test_cancel_of_a_pending_booking_cancels_it_and_of_a_committed_one_says_done(
    stack: SurfaceStack,
) -> None:
    slow, quick = unique("nobu"), unique("pepe")
    await fault(stack, match=slow, latency_ms=1500, times=1)
    headers = headers_for(user())
    async with fast_client(stack.url, headers) as client:
        pending = await call_tool_task(
            client, "book_table", {"restaurant": slow, "date": DAY, "time": "21:00"},
            raise_on_error=False,
        )
        await asyncio.sleep(0.3)
        await pending.cancel()
        cancelled = await pending.result()
        assert [f["status"] for f in cancelled.structured_content["facts"]] == ["cancelled"]
        done = await call_tool_task(
            client, "book_table", {"restaurant": quick, "date": DAY, "time": "20:00"},
            raise_on_error=False,
        )
        booked = await done.result()
        assert [f["status"] for f in booked.structured_content["facts"]] == ["committed"]
        # Committed and completed: a cancel cannot undo it, and says so.
        with pytest.raises(MCPError, match="already completed"):
            await done.cancel()
        again = await done.status()
        assert again.status == "completed"
    assert await effects(stack, quick) == 1
