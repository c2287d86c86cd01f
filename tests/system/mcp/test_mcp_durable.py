"""What makes holdline's MCP tasks durable, and the other doors of `/mcp`: a surface killed
mid-task (another surface answers, and it answers again after its restart), a handoff that
changes `tools/list`, the untasked path with `holdline_pending`, and the OpenAI Agents SDK's
`MCPServerStreamableHttp` listing and calling holdline's tools (its model scripted)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from typing import Any

import httpx
import nats
from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp
from fastmcp_tasks import call_tool_task
from mcp.client.subscriptions import ToolsListChanged, listen

from examples.openai_agents_text import ScriptedModel
from libs.bus import Topology
from services.interaction_surface.mcp.tasks import call_id
from testkit.surface import SurfaceStack, effects, eventually, fault, unique

from .clients import bearer, fast_client, headers_for, open_session, sdk_client, user


async def test_a_surface_killed_mid_task_answers_for_it_after_restart(
    stack: SurfaceStack,
) -> None:
    access = unique("sentry")
    await fault(stack, match=access, latency_ms=1500, times=1)
    headers = headers_for(user())
    async with fast_client(stack.url, headers) as client:
        task = await call_tool_task(client, "provision_access", {"accesses": [access]})
        task_id = task.task_id
    surface = stack.procs["interaction_surface"]
    surface.kill9()
    try:
        # Another surface on the same streams answers for the task meanwhile.
        async with fast_client(stack.second_url, headers) as other:
            again = await call_tool_task(other, "provision_access", {"accesses": [access]})
            assert again.task_id == task_id
            elsewhere = await again.result()
    finally:
        surface.start(timeout_s=60)
    async with fast_client(stack.url, headers) as client:
        back = await call_tool_task(client, "provision_access", {"accesses": [access]})
        assert back.task_id == task_id
        status = await back.status()
        assert status.status == "completed"
        assert status.result == {
            "content": [{"type": "text", "text": elsewhere.content[0].text}],  # type: ignore[union-attr]
            "structuredContent": elsewhere.structured_content,
            "isError": False,
        }
    assert await effects(stack, access) == 1


async def test_a_handoff_changes_tools_list_and_notifies_listeners(stack: SurfaceStack) -> None:
    session = await open_session(stack)
    async with sdk_client(stack.url, bearer(session)) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert "billing_access" not in before
        assert {"provision_access", "holdline_pending"} <= before
        async with listen(client.session, tools_list_changed=True) as subscription:
            async with httpx.AsyncClient(base_url=stack.url) as http:
                answer = await http.post(
                    f"/v1/sessions/{session['session_id']}/handoff",
                    json={"agent": "billing"}, headers=bearer(session),
                )
                assert answer.status_code == 200, answer.text
            event = await asyncio.wait_for(anext(aiter(subscription)), 15)
            assert isinstance(event, ToolsListChanged)
        after = {t.name for t in (await client.list_tools(cache_mode="bypass")).tools}
        assert "billing_access" in after


async def test_untasked_calls_answer_the_acceptance_and_pending_fetches_the_closing(
    stack: SurfaceStack,
) -> None:
    access = unique("notion")
    async with sdk_client(stack.url, headers_for(user())) as client:
        answer = await client.call_tool("provision_access", {"accesses": [access]})
        [text] = answer.content
        assert "has started and is not finished" in text.text  # type: ignore[union-attr]
        assert not answer.is_error

        async def closing() -> str | None:
            found = await client.call_tool("holdline_pending", {})
            shown = found.content[0].text  # type: ignore[union-attr]
            return shown if access in shown else None

        shown = await eventually(closing, timeout_s=30)
        assert "Nothing pending" not in shown
        # Acknowledged `attached`: fetched once, not again.
        again = await client.call_tool("holdline_pending", {})
        assert access not in again.content[0].text  # type: ignore[union-attr]
    assert await effects(stack, access) == 1


async def test_openai_agents_sdk_lists_and_calls_holdlines_tools(stack: SurfaceStack) -> None:
    set_tracing_disabled(True)
    access = unique("linear")
    server = MCPServerStreamableHttp(
        params={"url": f"{stack.url}/mcp", "headers": headers_for(user())},
        name="holdline",
    )
    async with server:
        tools = await server.list_tools()
        assert "provision_access" in {t.name for t in tools}
        model = ScriptedModel()
        agent = Agent(name="assistant", instructions="You grant accesses.",
                      mcp_servers=[server], model=model)
        result = await Runner.run(agent, f"give me access to {access}")
    assert "has started and is not finished" in str(result.final_output)
    await eventually(lambda: _one(stack, access), timeout_s=20)


async def _one(stack: SurfaceStack, access: str) -> bool | None:
    return True if await effects(stack, access) == 1 else None


# --------------------------------------------------------------------------- bad input


async def _raw(stack: SurfaceStack, body: Any, headers: dict[str, str]) -> httpx.Response:
    """One 2026-07-28 request as the wire has it (its routing headers mirror the body)."""
    routing: dict[str, str] = {}
    if isinstance(body, dict):
        routing["Mcp-Method"] = body["method"]
        params = body.get("params", {})
        name = params.get("name") or params.get("taskId")
        if name:
            routing["Mcp-Name"] = name
    async with httpx.AsyncClient(base_url=stack.url) as http:
        return await http.post(
            "/mcp",
            content=body if isinstance(body, bytes) else None,
            json=None if isinstance(body, bytes) else body,
            headers={"MCP-Protocol-Version": "2026-07-28", "Accept": "application/json",
                     "Content-Type": "application/json", **routing, **headers},
        )


def _meta(tasks: bool = True) -> dict[str, Any]:
    caps: dict[str, Any] = {"extensions": {"io.modelcontextprotocol/tasks": {}}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": caps,
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }


async def test_bad_input_gets_json_rpc_errors_and_stores_nothing(stack: SurfaceStack) -> None:
    session = await open_session(stack)
    auth = bearer(session)
    # No credential at all: refused before the SDK sees it.
    refused = await _raw(stack, {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                                 "params": {"_meta": _meta()}}, {})
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] < 0
    # A malformed message.
    broken = await _raw(stack, b"{not json", auth)
    assert 400 <= broken.status_code < 500
    assert broken.json()["error"]["code"] == -32700
    # An unknown tool.
    unknown = await _raw(stack, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "launch_rocket", "arguments": {}, "_meta": _meta()}}, auth)
    assert unknown.json()["error"]["code"] == -32602
    assert "Unknown tool" in unknown.json()["error"]["message"]
    # Arguments that fail the schema: the tool's error, for the model to correct.
    bad = await _raw(stack, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "provision_access", "arguments": {"accesses": "github"}, "_meta": _meta()}},
        auth)
    assert bad.json()["result"]["isError"] is True
    # Unknown task ids, and another session's, answer alike.
    other = await open_session(stack)
    async with fast_client(stack.url, bearer(other)) as client:
        theirs = await call_tool_task(client, "provision_access", {"accesses": [unique("x")]})
        await theirs.result()
    answers = []
    for task_id in ("task_" + "0" * 40, theirs.task_id):
        got = await _raw(stack, {"jsonrpc": "2.0", "id": 4, "method": "tasks/get", "params": {
            "taskId": task_id, "_meta": _meta()}}, auth)
        error = got.json()["error"]
        answers.append((got.status_code, error["code"], error["message"].replace(task_id, "T")))
    assert answers[0] == answers[1]
    assert answers[0][1] == -32602
    # A tasks/* request from a client that did not declare the tasks extension.
    undeclared = await _raw(stack, {"jsonrpc": "2.0", "id": 6, "method": "tasks/get", "params": {
        "taskId": theirs.task_id, "_meta": _meta(tasks=False)}}, bearer(other))
    assert undeclared.json()["error"]["code"] == -32021
    # tasks/update for a task that is not waiting for input (its own, completed).
    not_waiting = await _raw(stack, {"jsonrpc": "2.0", "id": 5, "method": "tasks/update",
                                     "params": {"taskId": theirs.task_id, "inputResponses": {},
                                                "_meta": _meta()}}, bearer(other))
    assert not_waiting.json()["error"]["code"] == -32602
    # Nothing of any refusal was stored in the session.
    async with httpx.AsyncClient(base_url=stack.url) as http:
        events = (await http.get(f"/v1/sessions/{session['session_id']}/timeline",
                                 headers=auth)).json()["events"]
    assert [e["type"] for e in events] == ["session.opened"]



async def test_a_2025_11_25_client_lists_task_support_and_calls_untasked(
    stack: SurfaceStack,
) -> None:
    access = unique("miro")
    async with sdk_client(stack.url, headers_for(user()), mode="legacy") as client:
        assert client.session.protocol_version == "2025-11-25"
        tools = {t.name: t for t in (await client.list_tools()).tools}
        execution = tools["provision_access"].execution
        assert execution is not None
        assert execution.task_support == "optional"
        answer = await client.call_tool("provision_access", {"accesses": [access]})
        assert "has started and is not finished" in answer.content[0].text  # type: ignore[union-attr]
    await eventually(lambda: _one(stack, access), timeout_s=20)


async def test_a_reissue_joins_even_when_a_dead_surface_left_its_answer_unstored(
    stack: SurfaceStack,
) -> None:
    access = unique("asana")
    session = await open_session(stack)
    arguments = {"accesses": [access]}
    async with fast_client(stack.url, bearer(session)) as client:
        first = await call_tool_task(client, "provision_access", arguments)
        await first.result()
    # What a surface killed between answering and storing the answer leaves: the call id's
    # claim still `pending` (fresh, so no other surface may take it over yet).
    key = hashlib.sha256(call_id("provision_access", arguments, tasked=True).encode())
    nc = await nats.connect(stack.procs["interaction_surface"].env["NATS_URL"])
    try:
        kv = await nc.jetstream().key_value(Topology(stack.prefix).bucket("turns"))
        await kv.put(
            f"{session['session_id']}.tc.{key.hexdigest()[:40]}",
            json.dumps({"state": "pending", "turn_id": "t", "at": time.time()}).encode(),
        )
    finally:
        await nc.close()
    started = time.perf_counter()
    async with fast_client(stack.url, bearer(session)) as client:
        again = await call_tool_task(client, "provision_access", arguments)
        assert again.task_id == first.task_id
    assert time.perf_counter() - started < 5, "the re-issue waited on the pending claim"
    assert await effects(stack, access) == 1
