"""HTTP tools from a TOML file (`HOLDLINE_TOOLS_FILE`, docs/contract.md §7b): a declaration with
no code.

Each `[[tools]]` entry becomes a `ToolDeclaration` and an `HttpExecutor`. The file is checked
whole at start-up; every message names the file, the entry and the field, and the service
does not start. `parameters` is a JSON Schema object, turned into a msgspec struct
(`json_schema.py`) so the arguments are validated exactly like a Python tool's. The
`[tools.http]` table is read in `http_table.py`; `${NAME}` and `${NAME:-default}` in a URL or
a header are read from the environment at start (`file_entry.py`).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import DeclarationError, argument_types, problems
from .declaration import ROLES, BusinessLimits, Limits, ToolDeclaration
from .file_entry import FileEntry, read_table, read_typed
from .http import DEFAULT_MAX_RESPONSE_BYTES, HttpExecutor
from .http_table import http_spec
from .json_schema import SchemaError, struct_of_schema
from .templates import Template, TemplateError
from .wire import HttpClient

if TYPE_CHECKING:
    from .registry import ToolRegistry

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_TOP = frozenset(
    {
        "name",
        "description",
        "parameters",
        "batch_field",
        "item_field",
        "max_batch",
        "idempotent",
        "cancellable",
        "needs_confirmation",
        "subject_key",
        "owner",
        "priority",
        "duplicate_policy",
        "max_attempts",
        "backoff_base_s",
        "backoff_max_s",
        "attempt_timeout_s",
        "deadline_s",
        "limits",
        "overflow",
        "max_amount",
        "max_per_user_per_hour",
        "agents",
        "read_only",
        "owned_values",
        "open",
        "label",
        "closing",
        "failure",
        "roles",
        "http",
    }
)
_LIMITS = frozenset({"global_open", "per_tenant_open", "per_user_open", "running"})
_CHOICES: dict[str, tuple[str, ...]] = {
    "owner": ("session", "agent"),
    "priority": ("normal", "urgent"),
    "duplicate_policy": ("allow", "reject", "replace", "confirm"),
    "overflow": ("reject", "queue", "coalesce", "degrade"),
}


def _template_fn(
    entry: FileEntry, raw: Mapping[str, Any], field: str, arguments: set[str], *, result: bool
) -> Template | None:
    text = raw.get(field)
    if text is None:
        return None
    if not isinstance(text, str) or not text.strip():
        raise entry.error(field, "must be a non-empty string")
    try:
        template = Template(text)
    except TemplateError as exc:
        raise entry.error(field, str(exc)) from None
    unknown = template.unknown(arguments, result=result)
    if unknown:
        allowed = ", ".join(sorted(arguments)) + (", result.<field>" if result else "")
        raise entry.error(field, f"{{{unknown[0]}}} is not a field (known: {allowed})")
    return template


def _render_closing(template: Template) -> Callable[[Mapping[str, Any], Mapping[str, Any]], str]:
    return lambda arguments, result: template.render({**arguments, "result": dict(result)})


def _render_failure(template: Template) -> Callable[[Mapping[str, Any], str], str]:
    return lambda arguments, detail: template.render({**arguments, "detail": detail})


def _roles(
    entry: FileEntry, raw: Mapping[str, Any], names: set[str]
) -> tuple[dict[str, Any], list[str]]:
    roles = raw.get("roles", {})
    if not isinstance(roles, dict):
        raise entry.error("roles", "must be a table of argument = role")
    for arg, role in roles.items():
        if arg not in names:
            raise entry.error(
                f"roles.{arg}",
                f"{arg!r} is not an argument of the tool ({', '.join(sorted(names))})",
            )
        if role not in ROLES:
            raise entry.error(f"roles.{arg}", f"{role!r} is not one of {', '.join(ROLES)}")
    subject_key = raw.get("subject_key", [])
    if not isinstance(subject_key, list) or not all(isinstance(s, str) for s in subject_key):
        raise entry.error("subject_key", "must be a list of argument names")
    for s in subject_key:
        if s not in names:
            raise entry.error("subject_key", f"{s!r} is not an argument of the tool")
    return dict(roles), subject_key


def _arguments(
    entry: FileEntry, raw: Mapping[str, Any], name: str, batch_field: str | None
) -> tuple[type[Any], str | None]:
    """The arguments struct of `parameters` (of one item, for a batch tool) and the item field."""
    schema = raw.get("parameters")
    if schema is None:
        raise entry.error("parameters", "required: a JSON Schema object")
    item_field = None
    if batch_field is not None:
        # A batch tool: `parameters.properties.<batch_field>` is an array; each item is one
        # operation whose arguments are {item_field: item}.
        props = schema.get("properties", {}) if isinstance(schema, dict) else {}
        array = props.get(batch_field) if isinstance(props, dict) else None
        if not isinstance(array, dict) or array.get("type") != "array":
            raise entry.error("batch_field", f"{batch_field!r} must name an array property")
        item_field = read_typed(entry, raw, "item_field", str, batch_field)
        schema = {
            "type": "object",
            "properties": {item_field: array.get("items")},
            "required": [item_field],
        }
    try:
        return struct_of_schema(name, schema), item_field
    except SchemaError as exc:
        field = f"parameters.{exc.field}" if exc.field else "parameters"
        raise entry.error(field, exc.problem) from None


def parse_entry(
    path: Path,
    index: int,
    raw: Any,
    client: HttpClient | None,
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    within: str = "",
    executor: str | None = None,
) -> tuple[ToolDeclaration, HttpExecutor | None]:
    """One `[[tools]]` entry → its declaration (and executor when a client is given).

    `executor` names an executor of another kind (an MCP server's tools, `mcp_file.py`):
    the entry then has no `http` table and no HTTP executor is built."""
    entry = FileEntry(path, index, raw if isinstance(raw, dict) else {}, within=within)
    raw = read_table(entry, raw, "", _TOP)
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        shape = "lowercase letters, digits and _, starting with a letter (max 64)"
        raise entry.error("name", f"must be {shape}" if name is not None else f"required: {shape}")
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        raise entry.error("description", "required: what the tool does, for the model")
    batch_field = read_typed(entry, raw, "batch_field", str, None)
    arguments, item_field = _arguments(entry, raw, name, batch_field)
    names = set(argument_types(arguments))
    roles, subject_key = _roles(entry, raw, names)
    for field, choices in _CHOICES.items():
        if field in raw and raw[field] not in choices:
            raise entry.error(field, f"{raw[field]!r} is not one of {', '.join(choices)}")
    limits_raw = read_table(entry, raw.get("limits", {}), "limits", _LIMITS)
    limits = Limits()
    try:
        limits = Limits(**{k: read_typed(entry, limits_raw, k, int, None) for k in limits_raw})
    except TypeError as exc:
        raise entry.error("limits", str(exc)) from None
    agents = raw.get("agents")
    if agents is not None and (
        not isinstance(agents, list) or not all(isinstance(a, str) for a in agents)
    ):
        raise entry.error("agents", "must be a list of agent names")
    label = _template_fn(entry, raw, "label", names, result=False)
    closing = _template_fn(entry, raw, "closing", names, result=True)
    # A failure line names arguments and `{detail}`, why it failed.
    failure = _template_fn(entry, raw, "failure", names | {"detail"}, result=False)
    if executor is not None and "http" in raw:
        raise entry.error("http", "not for a tool of an MCP server (called through its server)")
    http = (
        http_spec(entry, raw.get("http"), names, raw, max_response_bytes=max_response_bytes)
        if executor is None
        else None
    )
    owned = raw.get("owned_values", [])
    if not isinstance(owned, list) or not all(isinstance(o, str) for o in owned):
        raise entry.error("owned_values", "must be a list of strings")
    defaults = ToolDeclaration(name=name, description="", arguments=arguments, executor="")
    declaration = ToolDeclaration(
        name=name,
        description=description.strip(),
        arguments=arguments,
        executor=executor or f"http.{name}",
        batch_field=batch_field,
        item_field=item_field,
        max_batch=read_typed(entry, raw, "max_batch", int, defaults.max_batch),
        idempotent=read_typed(entry, raw, "idempotent", bool, True),
        cancellable=read_typed(entry, raw, "cancellable", bool, False),
        needs_confirmation=read_typed(entry, raw, "needs_confirmation", bool, False),
        subject_key_fields=tuple(subject_key),
        owner=raw.get("owner", defaults.owner),
        read_only=read_typed(entry, raw, "read_only", bool, False),
        max_attempts=read_typed(entry, raw, "max_attempts", int, defaults.max_attempts),
        backoff_base_s=read_typed(entry, raw, "backoff_base_s", float, defaults.backoff_base_s),
        backoff_max_s=read_typed(entry, raw, "backoff_max_s", float, defaults.backoff_max_s),
        attempt_timeout_s=read_typed(
            entry, raw, "attempt_timeout_s", float, defaults.attempt_timeout_s
        ),
        deadline_s=read_typed(entry, raw, "deadline_s", float, defaults.deadline_s),
        priority=raw.get("priority", defaults.priority),
        duplicate_policy=raw.get("duplicate_policy", defaults.duplicate_policy),
        limits=limits,
        overflow=raw.get("overflow", defaults.overflow),
        business=BusinessLimits(
            max_amount=read_typed(entry, raw, "max_amount", int, None),
            max_per_user_per_hour=read_typed(entry, raw, "max_per_user_per_hour", int, None),
        ),
        agents=frozenset(agents) if agents is not None else None,
        roles=dict(roles),
        owned_values=frozenset(owned),
        open=read_typed(entry, raw, "open", bool, False),
        label=label.render if label else None,
        closing=_render_closing(closing) if closing else None,
        failure=_render_failure(failure) if failure else None,
    )
    found = problems(declaration)
    if found:
        raise entry.error("declaration", "; ".join(found))
    if http is None or client is None:
        return declaration, None
    return declaration, HttpExecutor(http, client)


class NoTools(DeclarationError):
    """A tools file that declares no tool at all."""


def load_tools_file(
    path: str,
    registry: ToolRegistry,
    client: HttpClient | None,
    *,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> None:
    """Read, check and register every tool of the file; raise naming the first problem.
    `max_response_bytes`: the cap of a tool that declares none."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeclarationError(f"HOLDLINE_TOOLS_FILE {file}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{file}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"tools", "mcp_servers"})
    if unknown:
        raise DeclarationError(
            f"{file}: {unknown[0]}: unknown top-level field (only [[tools]] and [[mcp_servers]])"
        )
    tools = data.get("tools", [] if "mcp_servers" in data else None)
    if not isinstance(tools, list) or not (tools or "mcp_servers" in data):
        raise NoTools(f"{file}: no [[tools]] entries")
    for index, raw in enumerate(tools):
        declaration, executor = parse_entry(
            file, index, raw, client, max_response_bytes=max_response_bytes
        )
        try:
            registry.declare(declaration, origin=f"{file}: tools[{index}]")
        except DeclarationError as exc:
            raise DeclarationError(
                f"{file}: tools[{index}] ({declaration.name!r}): name: {exc}"
            ) from None
        if executor is not None:
            registry.register_executor(declaration.executor, executor)
    if "mcp_servers" in data:
        # Imported here: `mcp_file` reads entries through this module, and it needs the `mcp`
        # client (the `server` extra), which a file of HTTP tools alone does not.
        from .mcp_file import load_mcp_servers  # noqa: PLC0415

        load_mcp_servers(file, data["mcp_servers"], registry, execute=client is not None)
