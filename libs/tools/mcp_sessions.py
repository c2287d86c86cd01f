"""Connections to MCP servers: one session per server per worker, kept open and reopened.

A `McpConnection` owns one server's `mcp` client session in a task of its own (the SDK's
sessions live in a task group that must be entered and left by one task). Only the worker
keeps one (`keep`); a process that only admits asks a server that was down at start again,
with backoff, until it answers once. While a kept session is up, a `tools/list` every
`ping_s` notices a dead server (a killed stdio process, a stopped HTTP server); the session
is then closed and opened again with capped exponential backoff, which restarts a stdio
server. Its stderr is inherited, so it lands in the process's log. `unavailable` says why
the server cannot be used right now (None when it can): admission refuses its tools with
that reason until it answers again.

`list_now` lists a server's tools once, from synchronous start-up code, in a thread of its
own (the tools file is read before the process's event loop serves anything).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import threading
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from .mcp_wire import TASKS, TasksSupport

log = logging.getLogger("holdline.tools.mcp")
# The SDK's HTTP client logs every request at INFO: one a second per server while a session
# is checked. Its warnings and errors still reach the log.
logging.getLogger("httpx2").setLevel(logging.WARNING)


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """Where one `[[mcp_servers]]` entry is and how to reach it."""

    name: str
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """The server as an operator reads it in a message."""
        return self.url or " ".join((self.command or "", *self.args))


class NotConnected(Exception):
    """The server has no open session: nothing was sent."""


@contextlib.asynccontextmanager
async def open_client(spec: McpServerSpec, *, timeout_s: float) -> AsyncIterator[Client]:
    """An entered `mcp` client for the server, advertising the tasks extension."""
    if spec.url is not None:
        async with create_mcp_http_client(headers=dict(spec.headers)) as http:
            transport = streamable_http_client(spec.url, http_client=http)
            async with Client(
                transport, extensions=[TasksSupport()], read_timeout_seconds=timeout_s, cache=None
            ) as client:
                yield client
        return
    params = StdioServerParameters(
        command=spec.command or "", args=list(spec.args), env=dict(spec.env) or None
    )
    async with Client(
        stdio_client(params, errlog=sys.stderr),
        extensions=[TasksSupport()],
        read_timeout_seconds=timeout_s,
        cache=None,
    ) as client:
        yield client


async def _list(spec: McpServerSpec, timeout_s: float) -> dict[str, mcp_types.Tool]:
    async with asyncio.timeout(timeout_s), open_client(spec, timeout_s=timeout_s) as client:
        return {t.name: t for t in (await client.session.list_tools()).tools}


def list_now(spec: McpServerSpec, *, timeout_s: float) -> dict[str, mcp_types.Tool] | str:
    """The server's tools, listed once from synchronous code; a reason when it cannot answer."""
    answer: list[dict[str, mcp_types.Tool] | str] = []

    def run() -> None:
        try:
            answer.append(asyncio.run(_list(spec, timeout_s)))
        except BaseException as exc:  # noqa: BLE001 - any failure means "cannot be reached"
            answer.append(describe(exc))

    thread = threading.Thread(target=run, name=f"mcp-list-{spec.name}", daemon=True)
    thread.start()
    thread.join(timeout_s + 5.0)
    return answer[0] if answer else f"no answer within {timeout_s:g} s"


def describe(exc: BaseException) -> str:
    """One line for an exception (an exception group is described by its first leaf)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]


class McpConnection:
    """One server's session in this process, opened on first use and reopened when it dies."""

    def __init__(
        self,
        spec: McpServerSpec,
        *,
        down: str | None = None,
        keep: bool = True,
        timeout_s: float = 10.0,
        ping_s: float = 1.0,
        backoff_base_s: float = 0.2,
        backoff_max_s: float = 5.0,
    ) -> None:
        self.spec = spec
        self._down = down
        # False (a process that only admits): no session is kept; a server down at start is
        # asked again with backoff until it answers once, then left alone.
        self._keep = keep
        self._timeout_s = timeout_s
        self._ping_s = ping_s
        self._backoff = (backoff_base_s, backoff_max_s)
        self._client: Client | None = None
        self._task: asyncio.Task[None] | None = None
        self._up: asyncio.Event | None = None
        self._broken: asyncio.Event | None = None
        self.listed: dict[str, mcp_types.Tool] = {}
        self.opened = 0

    def unavailable(self) -> str | None:
        """Why the server cannot be used now (None when it answered last time it was asked)."""
        if self._down is None:
            return None
        return f"MCP server {self.spec.name!r} ({self.spec.address}) is unavailable: {self._down}"

    @property
    def supports_tasks(self) -> bool:
        """Whether the open session's server offers the tasks extension."""
        client = self._client
        if client is None:
            return False
        extensions = client.server_capabilities.extensions or {}
        return TASKS in extensions

    async def session(self, *, wait_s: float) -> ClientSession:
        """The open session; waits up to `wait_s` for one, else `NotConnected`."""
        self._start()
        assert self._up is not None
        if self._client is None:
            # A first session (a stdio server starting up) gets the caller's whole wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wait_s)):
                    await self._up.wait()
        client = self._client
        if client is None:
            raise NotConnected(self.unavailable() or f"MCP server {self.spec.name!r} is not open")
        return client.session

    def broken(self) -> None:
        """A call failed on the transport: close the session and open a new one."""
        if self._broken is not None:
            self._broken.set()

    def start(self) -> None:
        """Open the session (`keep`), or ask a server that was down until it answers."""
        self._start()

    def _start(self) -> None:
        if self._task is not None and not self._task.done():
            return
        if not self._keep and self._down is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # start-up code: the first call in the event loop starts it
        self._up, self._broken = asyncio.Event(), asyncio.Event()
        self._task = loop.create_task(self._run(), name=f"mcp-{self.spec.name}")

    async def _run(self) -> None:
        assert self._up is not None
        assert self._broken is not None
        failures = 0
        while True:
            try:
                async with open_client(self.spec, timeout_s=self._timeout_s) as client:
                    listed = await client.session.list_tools()
                    self.listed = {t.name: t for t in listed.tools}
                    self._client, self._down = client, None
                    self.opened += 1
                    failures = 0
                    if not self._keep:
                        log.info("MCP server %s answers again", self.spec.name)
                        return
                    self._broken.clear()
                    self._up.set()
                    log.info("MCP server %s: session open (%s)", self.spec.name, self.spec.address)
                    await self._watch(client)
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - a dead server is reopened, not fatal
                self._down = describe(exc)
                log.warning("MCP server %s: %s", self.spec.name, self._down)
            finally:
                self._client = None
                self._up.clear()
            if self._down is None:
                self._down = "the session closed"
            failures += 1
            base, cap = self._backoff
            await asyncio.sleep(min(cap, base * 2 ** min(failures - 1, 10)))

    async def _watch(self, client: Client) -> None:
        assert self._broken is not None
        while not self._broken.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._ping_s):
                    await self._broken.wait()
            if self._broken.is_set():
                break
            # `tools/list`, not `ping` (gone from the 2026-07-28 protocol): it also keeps the
            # listing current.
            async with asyncio.timeout(max(2.0, self._ping_s * 2)):
                listed = await client.session.list_tools()
            self.listed = {t.name: t for t in listed.tools}
        self._down = "a call failed on the transport; reopening"

    async def aclose(self) -> None:
        """Close the session (and stop a stdio server)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


def tool_summary(tool: mcp_types.Tool) -> dict[str, Any]:
    """What a listed tool contributes to a declaration: its description and input schema."""
    return {"description": tool.description or "", "parameters": dict(tool.input_schema)}
