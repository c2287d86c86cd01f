"""MCP clients of the suite: the `mcp` SDK's `Client` and FastMCP's `Client`, over real HTTP,
authenticated with static headers (a fresh user per test) or a session's bearer token."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import fastmcp_tasks  # noqa: F401 - importing it registers FastMCP's tasks client extension
import httpx
import httpx2
import mcp
from fastmcp import Client as FastClient
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks.client import TasksClientExtension
from fastmcp_tasks.client_models import ClientGetTaskResult, GetTaskRequest, GetTaskRequestParams
from mcp.client.streamable_http import streamable_http_client

from testkit.surface import SurfaceStack

DAY = "2026-12-24"


def user() -> str:
    """A user id no other test uses."""
    return f"u-{uuid.uuid4().hex[:8]}"


def headers_for(user_id: str, tenant: str = "acme") -> dict[str, str]:
    """The static headers of a client that opens its session by who it is."""
    return {"X-Holdline-User": user_id, "X-Holdline-Tenant": tenant}


@asynccontextmanager
async def sdk_client(
    url: str, headers: dict[str, str], **options: Any
) -> AsyncIterator[mcp.Client]:
    """The `mcp` SDK's client on `/mcp` (protocol negotiated: the modern one)."""
    async with httpx2.AsyncClient(headers=headers, timeout=20.0) as http:
        transport = streamable_http_client(f"{url}/mcp", http_client=http)
        async with mcp.Client(transport, **options) as client:
            yield client


@asynccontextmanager
async def fast_client(
    url: str, headers: dict[str, str], **options: Any
) -> AsyncIterator[FastClient[Any]]:
    """FastMCP's client on `/mcp` (its task support on: fastmcp_tasks is imported)."""
    transport = StreamableHttpTransport(f"{url}/mcp", headers=headers)
    async with FastClient(transport, **options) as client:
        yield client


@asynccontextmanager
async def sdk_tasks_client(
    url: str, headers: dict[str, str], **options: Any
) -> AsyncIterator[mcp.Client]:
    """The `mcp` SDK's client advertising the tasks extension (the reference client half's
    claim), so a call comes back as the server's task rather than its result."""
    async with sdk_client(url, headers, extensions=[TasksClientExtension()], **options) as c:
        yield c


async def sdk_call_task(client: mcp.Client, name: str, arguments: dict[str, Any]) -> Any:
    """`tools/call` answered with a task: the `CreateTaskResult` as the client read it."""
    return await client.session.call_tool(name, arguments, allow_claimed=True)


async def sdk_get(client: mcp.Client, task_id: str) -> ClientGetTaskResult:
    """`tasks/get` over the SDK's session."""
    request = GetTaskRequest(params=GetTaskRequestParams(task_id=task_id))
    return await client.session.send_request(request, ClientGetTaskResult)


async def sdk_until(
    client: mcp.Client, task_id: str, *statuses: str, timeout_s: float = 30.0
) -> ClientGetTaskResult:
    """Poll `tasks/get` until the task has one of `statuses` (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        current = await sdk_get(client, task_id)
        if current.status in statuses:
            return current
        assert asyncio.get_running_loop().time() < deadline, current
        await asyncio.sleep(0.1)


async def timeline(stack: SurfaceStack, session: dict[str, str]) -> list[dict[str, Any]]:
    """The session's events, read with its token."""
    async with httpx.AsyncClient(base_url=stack.url) as http:
        answer = await http.get(
            f"/v1/sessions/{session['session_id']}/timeline",
            headers={"Authorization": f"Bearer {session['token']}"},
        )
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


async def settled_timeline(
    stack: SurfaceStack, session: dict[str, str], timeout_s: float = 10.0
) -> list[dict[str, Any]]:
    """The session's events once its closing was recorded delivered: the hand-out is written
    through the bus, and the timeline reads the surface's view, which applies it a moment
    later (bounded)."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        events = await timeline(stack, session)
        done = any(e["type"] == "delivery.delivered" for e in events)
        if done or asyncio.get_running_loop().time() > deadline:
            return events
        await asyncio.sleep(0.1)


async def open_session(stack: SurfaceStack, agent: str | None = None) -> dict[str, str]:
    """A session opened over HTTP; its token is the MCP client's bearer credential."""
    body: dict[str, Any] = {"user_id": user(), "tenant_id": "acme"}
    if agent:
        body["agent"] = agent
    async with httpx.AsyncClient(base_url=stack.url) as http:
        answer = await http.post("/v1/sessions", json=body)
    assert answer.status_code == 201, answer.text
    opened: dict[str, str] = answer.json()
    return opened


def bearer(session: dict[str, str]) -> dict[str, str]:
    """The session's bearer header."""
    return {"Authorization": f"Bearer {session['token']}"}
