"""`[[mcp_servers]]` in the tools file (docs/contract.md §7c): an MCP server's tools, no code.

Each server entry has `name`, and `url` (Streamable HTTP, with `headers`) or `command`
(stdio, with `args` and `env`); `${NAME}` and `${NAME:-default}` in those values are read
from the environment. Each `[[mcp_servers.tools]]` entry imports one tool of the server
under the declaration fields of an HTTP tool (`http_file.parse_entry` reads them); its
`description` and `parameters` come from the server's `tools/list` unless given, and
`lookup = { tool, key_argument }` names the server's lookup tool. The server is listed once
at start: a tool it does not list, a role on an argument its schema lacks, or a lookup tool
it does not have refuses the file (file, entry and field in the message). A server that
cannot be reached does not: its tools are declared from what the file says (an argument per
role when no `parameters` are given) and listed unavailable until it answers.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import mcp_types

from .checks import DeclarationError
from .declaration import ToolDeclaration
from .file_entry import FileEntry, read_table, with_env
from .http_file import parse_entry
from .mcp_executor import McpExecutor, McpLookup
from .mcp_sessions import McpConnection, McpServerSpec, list_now, tool_summary

if TYPE_CHECKING:
    from .registry import ToolRegistry

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_SERVER = frozenset({"name", "url", "headers", "command", "args", "env", "tools"})
# How long start-up waits for a server's `tools/list`.
LIST_TIMEOUT_S = 10.0


class _Server:
    """Messages for one server entry: `<file>: mcp_servers[<i>] (<name>): <field>: <problem>`."""

    def __init__(self, path: Path, index: int, raw: Any) -> None:
        name = raw.get("name") if isinstance(raw, dict) else None
        self.within = f"mcp_servers[{index}]" + (f" ({name!r})" if isinstance(name, str) else "")
        self.where = f"{path}: {self.within}"

    def error(self, field: str, problem: str) -> DeclarationError:
        return DeclarationError(f"{self.where}: {field}: {problem}")


def _strings(server: _Server, raw: dict[str, Any], field: str, kind: type) -> Any:
    value = raw.get(field, kind())
    if kind is dict:
        ok = isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
        shape = "a table of strings"
    else:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        shape = "a list of strings"
    if not ok:
        raise server.error(field, f"must be {shape}")
    return value


def server_spec(path: Path, index: int, raw: Any) -> McpServerSpec:
    """One server entry's name and address (its tools are read by `load_mcp_servers`)."""
    server = _Server(path, index, raw)
    if not isinstance(raw, dict):
        raise server.error("mcp_servers", "must be a table")
    unknown = sorted(set(raw) - _SERVER)
    if unknown:
        raise server.error(unknown[0], f"unknown field (known: {', '.join(sorted(_SERVER))})")
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise server.error("name", "required: lowercase letters, digits, - and _ (max 64)")
    env_entry = FileEntry(path, index, {})
    env_entry.where = server.where

    def filled(field: str, text: str) -> str:
        return with_env(env_entry, field, text)

    url, command = raw.get("url"), raw.get("command")
    if (url is None) == (command is None):
        raise server.error("url", "give `url` (Streamable HTTP) or `command` (stdio), not both")
    if url is not None:
        url = filled("url", url) if isinstance(url, str) else url
        if not isinstance(url, str) or not re.match(r"^https?://", url):
            raise server.error("url", "must be an http:// or https:// URL")
        if "args" in raw or "env" in raw:
            raise server.error("args" if "args" in raw else "env", "only for a stdio server")
        headers = _strings(server, raw, "headers", dict)
        return McpServerSpec(
            name=name,
            url=url,
            headers={k: filled(f"headers.{k}", v) for k, v in headers.items()},
        )
    if not isinstance(command, str) or not command.strip():
        raise server.error("command", "must be a non-empty string")
    if "headers" in raw:
        raise server.error("headers", "only for a Streamable HTTP server")
    args = _strings(server, raw, "args", list)
    env = _strings(server, raw, "env", dict)
    return McpServerSpec(
        name=name,
        command=filled("command", command),
        args=tuple(filled(f"args[{i}]", a) for i, a in enumerate(args)),
        env={k: filled(f"env.{k}", v) for k, v in env.items()},
    )


def _lookup(
    entry: FileEntry, raw: Any, listed: dict[str, mcp_types.Tool] | None
) -> McpLookup | None:
    if raw is None:
        return None
    table = read_table(entry, raw, "lookup", frozenset({"tool", "key_argument"}))
    tool, key = table.get("tool"), table.get("key_argument")
    if not isinstance(tool, str) or not tool:
        raise entry.error("lookup.tool", "required: the name of the server's lookup tool")
    if not isinstance(key, str) or not key:
        raise entry.error("lookup.key_argument", "required: the argument that takes the key")
    if listed is not None:
        if tool not in listed:
            raise entry.error("lookup.tool", f"the server lists no tool {tool!r}")
        properties = listed[tool].input_schema.get("properties") or {}
        if key not in properties:
            raise entry.error(
                "lookup.key_argument", f"{key!r} is not an argument of {tool!r}"
            )
    return McpLookup(tool=tool, key_argument=key)


def _assumed_schema(raw: dict[str, Any]) -> dict[str, Any]:
    """The schema of a tool whose server could not be listed: one argument per role."""
    roles = raw.get("roles", {}) if isinstance(raw.get("roles"), dict) else {}
    kind = {"amount": "integer"}
    return {
        "type": "object",
        "properties": {a: {"type": kind.get(r, "string")} for a, r in roles.items()},
        "required": sorted(roles),
    }


def tool_entry(
    path: Path,
    server: _Server,
    index: int,
    raw: Any,
    *,
    executor: str,
    listed: dict[str, mcp_types.Tool] | None,
) -> tuple[ToolDeclaration, McpLookup | None]:
    """One `[[mcp_servers.tools]]` entry → its declaration and lookup tool."""
    entry = FileEntry(path, index, raw if isinstance(raw, dict) else {}, within=f"{server.within}.")
    if not isinstance(raw, dict):
        raise entry.error("tools", "must be a table")
    fields = dict(raw)
    lookup_raw = fields.pop("lookup", None)
    name = fields.get("name")
    if listed is not None and isinstance(name, str):
        tool = listed.get(name)
        if tool is None:
            known = ", ".join(sorted(listed)) or "none"
            raise entry.error("name", f"the server lists no tool {name!r} (it lists {known})")
        for key, value in tool_summary(tool).items():
            fields.setdefault(key, value)
    elif listed is None:
        fields.setdefault("description", f"{name} (MCP tool)")
        fields.setdefault("parameters", _assumed_schema(fields))
    # MCP has no idempotency key of its own: a call a dead worker may have sent is looked up
    # (or ends `unknown_outcome`), never sent again, unless the entry says the tool is
    # idempotent.
    fields.setdefault("idempotent", False)
    lookup = _lookup(entry, lookup_raw, listed)
    declaration, _ = parse_entry(
        path, index, fields, None, within=f"{server.within}.", executor=executor
    )
    # A task's completion is read through `tasks/get`; no callback ever comes.
    return replace(declaration, polled=True), lookup


def load_mcp_servers(
    path: Path, servers: Any, registry: ToolRegistry, *, execute: bool
) -> None:
    """Declare every server's tools (and, with `execute`, register their executors)."""
    if not isinstance(servers, list) or not servers:
        raise DeclarationError(f"{path}: mcp_servers: must be [[mcp_servers]] entries")
    names: set[str] = set()
    for s_index, raw in enumerate(servers):
        spec = server_spec(path, s_index, raw)
        server = _Server(path, s_index, raw)
        if spec.name in names:
            raise server.error("name", f"{spec.name!r} names another server of the file")
        names.add(spec.name)
        tools = raw.get("tools")
        if not isinstance(tools, list) or not tools:
            raise server.error("tools", "required: [[mcp_servers.tools]] entries")
        answer = list_now(spec, timeout_s=LIST_TIMEOUT_S)
        listed = answer if isinstance(answer, dict) else None
        connection = McpConnection(
            spec, down=answer if isinstance(answer, str) else None, keep=execute
        )
        if listed is not None:
            connection.listed = listed
        declared: list[str] = []
        for t_index, tool_raw in enumerate(tools):
            name = tool_raw.get("name") if isinstance(tool_raw, dict) else None
            executor_name = f"mcp.{spec.name}.{name}"
            declaration, lookup = tool_entry(
                path, server, t_index, tool_raw, executor=executor_name, listed=listed
            )
            try:
                registry.declare(
                    declaration, origin=f"{path}: {server.within}.tools[{t_index}]"
                )
            except DeclarationError as exc:
                raise server.error(f"tools[{t_index}].name", str(exc)) from None
            if execute:
                registry.register_executor(
                    executor_name, McpExecutor(connection, declaration.name, lookup=lookup)
                )
            declared.append(declaration.name)
        registry.add_availability(declared, connection.unavailable)
        registry.add_source(connection.start, connection.aclose)

