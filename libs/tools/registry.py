"""Tools and executors registered by name; users add theirs from their own package.

`HOLDLINE_TOOL_MODULES` lists importable modules (comma-separated). Each must define
`register(registry: ToolRegistry) -> None`, called once at start-up.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import httpx

from libs.config import env_bool, env_str

from .declaration import ToolDeclaration
from .demo import DEMO_TOOLS
from .executor import Executor
from .sandbox import ROUTES, SandboxExecutor, provider_url


class UnknownTool(KeyError):
    """No tool is declared under that name."""


class ToolRegistry:
    """Declarations and executors, looked up by name."""

    def __init__(self) -> None:
        self._tools: dict[str, ToolDeclaration] = {}
        self._executors: dict[str, Executor] = {}

    def declare(self, declaration: ToolDeclaration) -> None:
        """Add or replace a tool declaration."""
        self._tools[declaration.name] = declaration

    def register_executor(self, name: str, executor: Executor) -> None:
        """Add or replace an executor (tests swap executors this way)."""
        self._executors[name] = executor

    def tool(self, name: str) -> ToolDeclaration:
        """A declaration by name."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownTool(name) from None

    def has(self, name: str) -> bool:
        """Whether a tool is declared."""
        return name in self._tools

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
        """Import user modules and let each register its tools and executors."""
        for name in modules:
            module = importlib.import_module(name)
            register = getattr(module, "register", None)
            if register is None:
                raise ImportError(f"tool module {name} has no register(registry) function")
            register(self)


def default_registry(client: httpx.AsyncClient | None = None) -> ToolRegistry:
    """Demo tools with sandbox executors, plus whatever HOLDLINE_TOOL_MODULES adds."""
    registry = ToolRegistry()
    for declaration in DEMO_TOOLS:
        registry.declare(declaration)
    if client is not None:
        twice = env_bool("HOLDLINE_SANDBOX_CALLBACK_TWICE", default=False)
        for name, route in ROUTES.items():
            registry.register_executor(name, SandboxExecutor(route, client, callback_twice=twice))
    modules = [m.strip() for m in env_str("HOLDLINE_TOOL_MODULES", "").split(",") if m.strip()]
    registry.load_modules(modules)
    return registry


def sandbox_client() -> httpx.AsyncClient:
    """The HTTP client executors share (one connection pool per process)."""
    return httpx.AsyncClient(
        base_url=provider_url(),
        limits=httpx.Limits(max_connections=200, max_keepalive_connections=100),
    )
