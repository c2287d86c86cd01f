"""The 2025-11-25 tasks API over real HTTP, spoken by a raw JSON-RPC client: `initialize`,
`tools/call` with `task`, `tasks/get` polling, `tasks/result`, `tasks/list`, `tasks/cancel`,
a confirmation answered with `confirm_operation`; the provider's ledger counts the real
effects, and a task id of another session answers like one that does not exist."""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from testkit.surface import SurfaceStack, effects, fault, unique

from .clients import DAY, bearer, headers_for, open_session, settled_timeline, user

VERSION = "2025-11-25"
RELATED = "io.modelcontextprotocol/related-task"
IMMEDIATE = "io.modelcontextprotocol/model-immediate-response"


class Legacy:
    """A 2025-11-25 client that is nothing but JSON-RPC over HTTP POSTs."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http
        self.ids = itertools.count(1)

    async def post(self, body: dict[str, Any], *, versioned: bool = True) -> httpx.Response:
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        if versioned:
            headers["MCP-Protocol-Version"] = VERSION
        return await self.http.post("/mcp", json=body, headers=headers)

    async def initialize(self) -> dict[str, Any]:
        answer = await self.post({
            "jsonrpc": "2.0", "id": next(self.ids), "method": "initialize",
            "params": {"protocolVersion": VERSION,
                       "capabilities": {"tasks": {"list": {}, "cancel": {}}},
                       "clientInfo": {"name": "raw-2025-11-25", "version": "0"}},
        }, versioned=False)
        assert answer.status_code == 200, answer.text
        initialized = await self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert initialized.status_code == 202, initialized.text
        result: dict[str, Any] = answer.json()["result"]
        return result

    async def rpc(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The whole JSON-RPC response (`result` or `error`)."""
        body: dict[str, Any] = {"jsonrpc": "2.0", "id": next(self.ids), "method": method}
        if params is not None:
            body["params"] = params
        answer = await self.post(body)
        assert answer.status_code == 200, answer.text
        message: dict[str, Any] = answer.json()
        return message

    async def ok(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        message = await self.rpc(method, params)
        assert "result" in message, message
        result: dict[str, Any] = message["result"]
        return result

    async def task(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """`tools/call` with `task`: the `CreateTaskResult`."""
        return await self.ok("tools/call", {"name": name, "arguments": arguments,
                                            "task": {"ttl": 60_000}})

    async def until(self, task_id: str, *statuses: str, timeout_s: float = 20.0
                    ) -> dict[str, Any]:
        """Poll `tasks/get` until the task has one of `statuses` (bounded)."""
        deadline = time.monotonic() + timeout_s
        while True:
            current = await self.ok("tasks/get", {"taskId": task_id})
            if current["status"] in statuses:
                return current
            assert time.monotonic() < deadline, current
            await asyncio.sleep(0.1)


@asynccontextmanager
async def legacy(
    stack: SurfaceStack, headers: dict[str, str], url: str | None = None
) -> AsyncIterator[Legacy]:
    base = url or stack.url
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=40.0) as http:
        client = Legacy(http)
        yield client


async def test_a_tasked_call_is_polled_to_its_result_and_a_reissue_joins_it(
    stack: SurfaceStack,
) -> None:
    access = unique("zendesk")
    await fault(stack, match=access, latency_ms=1200, times=1)
    session = await open_session(stack)
    async with legacy(stack, bearer(session)) as client:
        hello = await client.initialize()
        assert hello["protocolVersion"] == VERSION
        assert hello["capabilities"]["tasks"] == {
            "list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
        tools = {t["name"]: t for t in (await client.ok("tools/list"))["tools"]}
        assert tools["provision_access"]["execution"] == {"taskSupport": "optional"}
        assert "execution" not in tools["holdline_pending"]

        started = time.perf_counter()
        created = await client.task("provision_access", {"accesses": [access]})
        assert time.perf_counter() - started < 1.0
        task = created["task"]
        assert task["status"] == "working"
        assert task["pollInterval"] > 0
        assert task["ttl"] > 0
        assert "has started" in created["_meta"][IMMEDIATE]
        first = await client.until(task["taskId"], "working", "completed")
        assert first["status"] == "working", "finished before the provider's 1.2 s"

        # The client lost the answer and re-issues the call: the same batch, the same task.
        again = await client.task("provision_access", {"accesses": [access]})
        assert again["task"]["taskId"] == task["taskId"]

        done = await client.until(task["taskId"], "completed")
        assert "tasks/result" in done["statusMessage"]
        result = await client.ok("tasks/result", {"taskId": task["taskId"]})
        listed = await client.ok("tasks/list")
    assert access in result["content"][0]["text"], result
    assert result["isError"] is False
    assert result["_meta"][RELATED] == {"taskId": task["taskId"]}
    assert [f["status"] for f in result["structuredContent"]["facts"]] == ["committed"]
    assert [(t["taskId"], t["status"]) for t in listed["tasks"]] == [
        (task["taskId"], "completed")]
    assert await effects(stack, access) == 1
    # The result handed out is the batch's one delivery, on channel mcp, delivered once.
    events = await settled_timeline(stack, session)
    sent = [e for e in events if e["type"] == "delivery.sent"]
    assert [e["data"]["channel"] for e in sent] == ["mcp"]
    assert len([e for e in events if e["type"] == "delivery.delivered"]) == 1


async def test_tasks_result_waits_and_cancel_says_cancelled_only_when_confirmed(
    stack: SurfaceStack,
) -> None:
    slow, quick = unique("noma"), unique("tickets")
    await fault(stack, match=slow, latency_ms=1500, times=1)
    async with legacy(stack, headers_for(user())) as client:
        await client.initialize()
        pending = await client.task(
            "book_table", {"restaurant": slow, "date": DAY, "time": "21:00"})
        await asyncio.sleep(0.3)
        cancelled = await client.ok("tasks/cancel", {"taskId": pending["task"]["taskId"]})
        assert cancelled["status"] == "cancelled", cancelled
        closing = await client.ok("tasks/result", {"taskId": pending["task"]["taskId"]})
        assert [f["status"] for f in closing["structuredContent"]["facts"]] == ["cancelled"]
        # A terminal task cannot be cancelled again: the spec's -32602.
        twice = await client.rpc("tasks/cancel", {"taskId": pending["task"]["taskId"]})
        assert twice["error"]["code"] == -32602
        assert "already cancelled" in twice["error"]["message"]

        # tasks/result on a running task waits for its end.
        booked = await client.task(
            "book_table", {"restaurant": quick, "date": DAY, "time": "20:00"})
        waited = await client.ok("tasks/result", {"taskId": booked["task"]["taskId"]})
        assert [f["status"] for f in waited["structuredContent"]["facts"]] == ["committed"]
        listed = await client.ok("tasks/list")
        assert {t["status"] for t in listed["tasks"]} == {"cancelled", "completed"}
    assert await effects(stack, quick) == 1


async def test_a_confirmation_is_input_required_and_answered_with_the_confirm_tool(
    stack: SurfaceStack,
) -> None:
    account = unique("acct")
    async with legacy(stack, headers_for(user())) as client:
        await client.initialize()
        tools = {t["name"]: t for t in (await client.ok("tools/list"))["tools"]}
        assert "execution" not in tools["confirm_operation"]
        created = await client.task(
            "transfer_money", {"to_account": account, "amount_cents": 1200})
        waiting = await client.until(created["task"]["taskId"], "input_required")
        message = waiting["statusMessage"]
        assert "confirm_operation" in message, message
        found = re.search(r"operation_id=(\S+)", message)
        assert found is not None, message
        arguments = {"operation_id": found.group(1), "confirmed": True}
        # The confirm tool answers at once; asked as a task it is the spec's -32601.
        tasked = await client.rpc("tools/call", {"name": "confirm_operation",
                                                 "arguments": arguments, "task": {}})
        assert tasked["error"]["code"] == -32601
        answer = await client.ok("tools/call", {"name": "confirm_operation",
                                                "arguments": arguments})
        assert "Confirmed" in answer["content"][0]["text"], answer
        result = await client.ok("tasks/result", {"taskId": created["task"]["taskId"]})
    assert [f["status"] for f in result["structuredContent"]["facts"]] == ["committed"]
    assert await effects(stack, account) == 1


async def test_another_sessions_task_answers_like_an_unknown_one(stack: SurfaceStack) -> None:
    access = unique("okta")
    headers = headers_for(user())
    async with legacy(stack, headers) as owner:
        await owner.initialize()
        theirs = (await owner.task("provision_access", {"accesses": [access]}))["task"]
    # Nothing of the task lives in a process: the other surface answers for it.
    async with legacy(stack, headers, stack.second_url) as elsewhere:
        await elsewhere.initialize()
        done = await elsewhere.ok("tasks/result", {"taskId": theirs["taskId"]})
        assert access in done["content"][0]["text"], done
    unknown = "task_" + "0" * 40
    async with legacy(stack, headers_for(user())) as other:
        await other.initialize()
        for method in ("tasks/get", "tasks/result", "tasks/cancel"):
            answers = []
            for task_id in (unknown, theirs["taskId"]):
                error = (await other.rpc(method, {"taskId": task_id}))["error"]
                answers.append((error["code"], error["message"].replace(task_id, "T")))
            assert answers[0] == answers[1], (method, answers)
            assert answers[0][0] == -32602
        assert (await other.ok("tasks/list"))["tasks"] == []
        bad_cursor = await other.rpc("tasks/list", {"cursor": "not-ours"})
        assert bad_cursor["error"]["code"] == -32602
    assert await effects(stack, access) == 1
