"""MCP clients of the suite: the `mcp` SDK's `Client` and FastMCP's `Client`, over real HTTP,
authenticated with static headers (a fresh user per test) or a session's bearer token."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import fastmcp_tasks  # noqa: F401 - importing it registers FastMCP's tasks client extension
import httpx2
import mcp
from fastmcp import Client as FastClient
from fastmcp.client.transports import StreamableHttpTransport
from mcp.client.streamable_http import streamable_http_client

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
