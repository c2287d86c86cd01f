"""Tools and executors registered by name; users add theirs from their own package or a file.

`HOLDLINE_TOOL_MODULES` lists importable modules (comma-separated). Each must define
`register(registry: ToolRegistry) -> None`, called once at start-up. `HOLDLINE_TOOLS_FILE`
names a TOML file of HTTP tools (`libs.tools.http_file`). Every declaration is checked as it
is added (`libs.tools.checks`); a duplicate name or a bad declaration stops the start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from libs.config import ToolSettings
from libs.modes import DEMO_TOOL_MODULES, NO_TOOLS_HINT

from .agents import AgentDeclaration
from .checks import DeclarationError, check
from .declaration import ToolDeclaration
from .executor import Executor
from .http_file import NoTools, load_tools_file
from .labels import label_of
from .wire import AiohttpClient, HttpClient


class UnknownTool(KeyError):
    """No tool is declared under that name."""


class ToolRegistry:
    """Declarations and executors, looked up by name; callbacks routed by executor name."""

    def __init__(
        self, client: HttpClient | None = None, settings: ToolSettings | None = None
    ) -> None:
        # What a module's `register(registry)` builds its executors with: the worker's
        # shared HTTP client (None where nothing is executed) and the tool settings.
        self.client = client
        self.settings = settings or ToolSettings()
        self._tools: dict[str, ToolDeclaration] = {}
        self._origins: dict[str, str] = {}
        self._executors: dict[str, Executor] = {}
        self._callbacks: dict[str, Executor] = {}
        # executor name → the callback route segments that reach it
        self._routes: dict[str, set[str]] = {}
        self._modules: set[str] = set()
        self._agents: dict[str, AgentDeclaration] = {}
        # Where declarations come from while they are being added (named in errors).
        self._origin = "holdline"
        # tool → why it cannot be used right now (None: it can); MCP servers' tools.
        self._availability: dict[str, Callable[[], str | None]] = {}
        self._openers: list[Callable[[], None]] = []
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def declare(self, declaration: ToolDeclaration, *, origin: str | None = None) -> None:
        """Add a tool; refused if the name is taken or the declaration is not enforceable."""
        origin = origin or self._origin
        taken = self._origins.get(declaration.name)
        if taken is not None:
            raise DeclarationError(
                f"tool {declaration.name!r} from {origin} is already declared by {taken}"
            )
        check(declaration)
        self._tools[declaration.name] = declaration
        self._origins[declaration.name] = origin

    def add_availability(self, tools: Iterable[str], reason: Callable[[], str | None]) -> None:
        """Tools whose source may be down: `reason()` says why they are refused right now."""
        for tool in tools:
            self._availability[tool] = reason

    def unavailable(self, tool: str) -> str | None:
        """Why a declared tool cannot be admitted right now (None when it can)."""
        reason = self._availability.get(tool)
        return reason() if reason is not None else None

    def add_source(
        self, open_: Callable[[], None], close: Callable[[], Awaitable[None]]
    ) -> None:
        """A tool source this process connects to (an MCP server): opened once the process's
        event loop runs (`open_sources`), closed with the process (`aclose`)."""
        self._openers.append(open_)
        self._closers.append(close)

    def open_sources(self) -> None:
        """Connect to the tool sources (called once, from the process's event loop)."""
        for open_ in self._openers:
            open_()

    async def aclose(self) -> None:
        """Close what the tools hold open (MCP sessions, stdio servers)."""
        for close in self._closers:
            await close()

    def declare_agent(self, agent: AgentDeclaration) -> None:
        """Add an agent (see `libs.tools.agents`); refused if the name is taken."""
        if agent.name in self._agents:
            raise DeclarationError(f"agent {agent.name!r} is already declared")
        self._agents[agent.name] = agent

    @property
    def agents(self) -> Mapping[str, AgentDeclaration]:
        """The declared agents by name (empty: every agent name is accepted)."""
        return self._agents

    def register_executor(
        self, name: str, executor: Executor, *, callback_route: str | None = None
    ) -> None:
        """Add an executor; its callbacks arrive at `/v1/callbacks/<name>` on the worker.

        `callback_route` adds a second route segment for the same executor (several
        executors behind one provider may share the route that provider posts to).
        """
        if name in self._executors:
            raise DeclarationError(f"executor {name!r} is already registered")
        self._executors[name] = executor
        self._callbacks[name] = executor
        self._routes[name] = {name}
        if callback_route is not None:
            self._callbacks.setdefault(callback_route, executor)
            self._routes[name].add(callback_route)

    def callback_receiver(self, route: str) -> Executor | None:
        """The executor that verifies and reads callbacks posted to this route segment."""
        return self._callbacks.get(route)

    def completes(self, route: str, tool: str) -> bool:
        """Whether callbacks posted to `route` may complete operations of `tool`."""
        if not self.has(tool):
            return False
        return route in self._routes.get(self.tool(tool).executor, set())

    def tool(self, name: str) -> ToolDeclaration:
        """A declaration by name."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownTool(name) from None

    def has(self, name: str) -> bool:
        """Whether a tool is declared."""
        return name in self._tools

    def label(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """What an operation of this tool is about, in the user's words."""
        return label_of(self._tools.get(tool), arguments)

    def executor_for(self, tool: str) -> Executor:
        """The executor that runs a tool."""
        declaration = self.tool(tool)
        try:
            return self._executors[declaration.executor]
        except KeyError:
            raise UnknownTool(f"{tool}: executor {declaration.executor!r} not registered") from None

    def tools(self, *, include_internal: bool = False) -> Iterable[ToolDeclaration]:
        """Every declaration (internal compensations only when asked)."""
        return [t for t in self._tools.values() if include_internal or not t.internal]

    def load_modules(self, modules: Iterable[str]) -> None:
        """Import user modules and let each register its tools and executors (once each)."""
        for name in modules:
            if name in self._modules:
                continue
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                raise DeclarationError(
                    f"HOLDLINE_TOOL_MODULES: cannot import {name}: {exc}"
                ) from None
            register = getattr(module, "register", None)
            if register is None:
                raise DeclarationError(
                    f"HOLDLINE_TOOL_MODULES: {name} has no register(registry) function"
                )
            self._modules.add(name)
            self._origin = f"module {name}"
            try:
                register(self)
            except DeclarationError as exc:
                raise DeclarationError(f"HOLDLINE_TOOL_MODULES: {name}: {exc}") from None
            finally:
                self._origin = "holdline"

    def check_links(self) -> None:
        """Compensating tools exist (run once everything is declared)."""
        for tool in self._tools.values():
            if tool.compensating_tool and tool.compensating_tool not in self._tools:
                raise DeclarationError(
                    f"tool {tool.name!r}: compensating_tool {tool.compensating_tool!r} "
                    "is not declared"
                )

    def check_agents(self) -> None:
        """Handoff targets are declared agents (run once everything is declared)."""
        for agent in self._agents.values():
            for target in sorted(agent.handoff_to or ()):
                if target not in self._agents:
                    raise DeclarationError(
                        f"agent {agent.name!r}: handoff_to {target!r} is not a declared agent"
                    )

    def check_executors(self) -> None:
        """Every tool's executor is registered (the worker runs this before it starts)."""
        for tool in self._tools.values():
            if tool.executor not in self._executors:
                raise DeclarationError(
                    f"tool {tool.name!r} ({self._origins[tool.name]}): executor "
                    f"{tool.executor!r} is not registered"
                )


_NO_TOOLS = ToolSettings()


def default_registry(
    client: HttpClient | None = None, settings: ToolSettings = _NO_TOOLS
) -> ToolRegistry:
    """The demo's tool modules in demo mode (`settings.demo`, see `libs.modes`), then
    `settings.modules` (HOLDLINE_TOOL_MODULES) and `settings.tools_file` (HOLDLINE_TOOLS_FILE),
    checked together.

    With a client (the worker), executors are registered too and every tool must have one.
    Raises DeclarationError, naming what to fix, when anything is wrong, and when production
    mode ends with no tool at all (saying how to start the demo instead).
    """
    registry = ToolRegistry(client, settings)
    registry.load_modules([*(DEMO_TOOL_MODULES if settings.demo else ()), *settings.modules])
    if settings.tools_file:
        try:
            load_tools_file(
                settings.tools_file, registry, client,
                max_response_bytes=settings.http_max_response_bytes,
            )
        except NoTools as exc:
            raise NoTools(str(exc) if settings.demo else f"{exc}. {NO_TOOLS_HINT}") from None
    if not settings.demo and not registry.tools():
        raise DeclarationError(f"no tools are configured. {NO_TOOLS_HINT}")
    registry.check_links()
    registry.check_agents()
    if client is not None:
        registry.check_executors()
    return registry


def sandbox_client(
    settings: ToolSettings = _NO_TOOLS, *, context: Callable[[], Mapping[str, str]] | None = None
) -> AiohttpClient:
    """The HTTP client executors share (one connection pool of up to 200 connections per
    process; relative URLs go to `SANDBOX_PROVIDER_URL`, the demo's system of record);
    `context` gives headers every request carries (the trace context)."""
    return AiohttpClient(settings.provider_url, limit=200, context=context)
