"""HTTP tools from a TOML file (`HOLDLINE_TOOLS_FILE`, docs/contract.md §7b): a declaration with
no code.

Each `[[tools]]` entry becomes a `ToolDeclaration` and an `HttpExecutor`. The file is checked
whole at start-up; every message names the file, the entry and the field, and the service
does not start. `parameters` is a JSON Schema object, turned into a msgspec struct so the
arguments are validated exactly like a Python tool's. `${NAME}` and `${NAME:-default}` in a
URL or a header are read from the environment at start.

Why one module of this size: every field of the file is read and checked here, in the
order of §7b, so a reader can hold the whole format in view.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from .checks import DeclarationError, argument_types, problems
from .declaration import ROLES, BusinessLimits, Limits, ToolDeclaration
from .http import DEFAULT_RETRYABLE, Callbacks, Endpoint, HttpExecutor, HttpSpec, States
from .templates import Template, TemplateError
from .wire import HttpClient

if TYPE_CHECKING:
    from .registry import ToolRegistry

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
_HEADER = re.compile(r"^[A-Za-z0-9-]{1,64}$")
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
        "roles",
        "http",
    }
)
_LIMITS = frozenset({"global_open", "per_tenant_open", "per_user_open", "running"})
_HTTP = frozenset({"execute", "lookup", "cancel", "retryable", "id_field", "status", "callback"})
_STATUS = frozenset({"field", "pending", "failed", "cancelled"})
_CALLBACK = frozenset(
    {"secret_env", "signature_header", "timestamp_header", "key_field", "result_field"}
)
_CHOICES: dict[str, tuple[str, ...]] = {
    "owner": ("session", "agent"),
    "priority": ("normal", "urgent"),
    "duplicate_policy": ("allow", "reject", "replace", "confirm"),
    "overflow": ("reject", "queue", "coalesce", "degrade"),
}
# JSON Schema keywords understood per property (anything else is refused, not ignored).
_SCALAR_KEYS = {
    "string": {"type", "description", "default", "enum", "minLength", "maxLength", "pattern"},
    "integer": {
        "type",
        "description",
        "default",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    },
    "number": {
        "type",
        "description",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    },
    "boolean": {"type", "description", "default"},
}
_META = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
    "minItems": "min_length",
    "maxItems": "max_length",
    "description": "description",
}
_PY = {"string": str, "integer": int, "number": float, "boolean": bool}


class _Entry:
    """Error messages for one entry: `<file>: tools[<i>] (<name>): <field>: <problem>`."""

    def __init__(self, path: Path, index: int, raw: Mapping[str, Any]) -> None:
        name = raw.get("name")
        self.where = f"{path}: tools[{index}]" + (f" ({name!r})" if isinstance(name, str) else "")

    def error(self, field: str, problem: str) -> DeclarationError:
        return DeclarationError(f"{self.where}: {field}: {problem}")


def _table(entry: _Entry, raw: Any, field: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise entry.error(field, "must be a table")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise entry.error(
            f"{field}.{unknown[0]}" if field else unknown[0],
            f"unknown field (known: {', '.join(sorted(allowed))})",
        )
    return raw


def _typed(entry: _Entry, raw: Mapping[str, Any], field: str, kind: type, default: Any) -> Any:
    value = raw.get(field, default)
    if value is default:
        return value
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise entry.error(field, f"must be {kind.__name__}, not {type(value).__name__}")
    return value


def _env(entry: _Entry, field: str, text: str) -> str:
    def fill(match: re.Match[str]) -> str:
        value = os.environ.get(match[1])
        if value is None:
            if match[2] is None:
                raise entry.error(field, f"environment variable {match[1]} is not set")
            return match[2]
        return value

    return _ENV.sub(fill, text)


# -- parameters: JSON Schema → msgspec struct --------------------------------------------------
def _property(entry: _Entry, field: str, schema: Any) -> Any:
    if not isinstance(schema, dict):
        raise entry.error(field, "must be a JSON Schema object")
    kind = schema.get("type")
    if kind == "array":
        unknown = sorted(set(schema) - {"type", "description", "items", "minItems", "maxItems"})
        if unknown:
            raise entry.error(f"{field}.{unknown[0]}", "not a supported JSON Schema keyword")
        item = _property(entry, f"{field}.items", schema.get("items"))
        return _annotate(entry, field, list[item], schema)  # type: ignore[valid-type]
    if kind not in _SCALAR_KEYS:
        raise entry.error(
            f"{field}.type", f"{kind!r} is not one of string, integer, number, boolean, array"
        )
    unknown = sorted(set(schema) - _SCALAR_KEYS[kind])
    if unknown:
        raise entry.error(f"{field}.{unknown[0]}", f"not a supported keyword for {kind}")
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise entry.error(f"{field}.enum", "must be a non-empty list")
        if not all(isinstance(v, _PY[kind]) and not isinstance(v, bool) for v in values):
            raise entry.error(f"{field}.enum", f"every value must be a {kind}")
        return _annotate(entry, field, Literal[tuple(values)], schema)
    return _annotate(entry, field, _PY[kind], schema)


def _annotate(entry: _Entry, field: str, base: Any, schema: Mapping[str, Any]) -> Any:
    meta = {_META[k]: v for k, v in schema.items() if k in _META}
    if "enum" in schema:
        meta = {k: v for k, v in meta.items() if k == "description"}
    if not meta:
        return base
    try:
        return Annotated[base, msgspec.Meta(**meta)]
    except (TypeError, ValueError) as exc:
        raise entry.error(field, str(exc)) from None


def arguments_struct(entry: _Entry, name: str, schema: Any) -> type[Any]:
    """A frozen msgspec struct for a JSON Schema object (unknown arguments are refused)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise entry.error("parameters", 'must be a JSON Schema object (type = "object")')
    unknown = sorted(
        set(schema) - {"type", "properties", "required", "additionalProperties", "description"}
    )
    if unknown:
        raise entry.error(f"parameters.{unknown[0]}", "not a supported JSON Schema keyword")
    if schema.get("additionalProperties", False) is not False:
        raise entry.error("parameters.additionalProperties", "only false is supported")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict):
        raise entry.error("parameters.properties", "must be a table")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise entry.error("parameters.required", "must be a list of argument names")
    missing = [r for r in required if r not in properties]
    if missing:
        raise entry.error("parameters.required", f"{missing[0]!r} is not a property")
    fields: list[Any] = []
    for arg, prop in properties.items():
        if not re.match(r"^[A-Za-z][A-Za-z0-9_]{0,63}$", arg):
            raise entry.error(f"parameters.properties.{arg}", "not a valid argument name")
        kind = _property(entry, f"parameters.properties.{arg}", prop)
        if arg in required:
            fields.append((arg, kind))
        elif "default" in prop:
            default = prop["default"]
            try:
                msgspec.convert(default, kind)
            except msgspec.ValidationError as exc:
                raise entry.error(f"parameters.properties.{arg}.default", str(exc)) from None
            fields.append((arg, kind, msgspec.field(default=default)))
        else:
            fields.append((arg, kind | None, None))
    return msgspec.defstruct(
        f"{name}_arguments",
        fields,
        kw_only=True,
        frozen=True,
        forbid_unknown_fields=True,
    )


# -- http ------------------------------------------------------------------------------------
def _endpoint(
    entry: _Entry, raw: Any, field: str, allowed: set[str], *, mutation: bool
) -> Endpoint:
    keys = {"method", "url"} | ({"idempotency_header"} if mutation else set())
    table = _table(entry, raw, field, frozenset(keys))
    method = str(table.get("method", "POST" if mutation else "GET")).upper()
    if method not in _METHODS:
        raise entry.error(
            f"{field}.method", f"{method!r} is not one of {', '.join(sorted(_METHODS))}"
        )
    url = table.get("url")
    if not isinstance(url, str) or not url:
        raise entry.error(f"{field}.url", "required")
    try:
        template = Template(_env(entry, f"{field}.url", url))
    except TemplateError as exc:
        raise entry.error(f"{field}.url", str(exc)) from None
    if not template.text.startswith(("http://", "https://")):
        raise entry.error(f"{field}.url", "must be an absolute http:// or https:// URL")
    unknown = template.unknown(allowed, result=field.endswith("cancel"))
    if unknown:
        raise entry.error(f"{field}.url", f"{{{unknown[0]}}} is not an argument of the tool")
    header = table.get("idempotency_header", "Idempotency-Key") if mutation else None
    if header is not None and (not isinstance(header, str) or not _HEADER.match(header)):
        raise entry.error(f"{field}.idempotency_header", "must be a header name")
    return Endpoint(method, template, header)


def _strings(
    entry: _Entry, raw: Mapping[str, Any], field: str, default: frozenset[str]
) -> frozenset[str]:
    value = raw.get(field)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise entry.error(field, "must be a list of strings")
    return frozenset(v.lower() for v in value)


def _http(entry: _Entry, raw: Any, arguments: set[str], decl: Mapping[str, Any]) -> HttpSpec:
    if raw is None:
        raise entry.error("http", "required: [tools.http] with execute and lookup")
    table = _table(entry, raw, "http", _HTTP)
    if "execute" not in table:
        raise entry.error("http.execute", "required")
    execute = _endpoint(entry, table["execute"], "http.execute", arguments, mutation=True)
    keyed = arguments | {"idempotency_key"}
    lookup = cancel = None
    if "lookup" in table:
        lookup = _endpoint(entry, table["lookup"], "http.lookup", keyed, mutation=False)
        if "idempotency_key" not in lookup.url.fields:
            raise entry.error("http.lookup.url", "must contain {idempotency_key}")
    elif not decl.get("read_only", False):
        raise entry.error(
            "http.lookup", "required: a lost answer is looked up before anything is sent again"
        )
    if "cancel" in table:
        cancel = _endpoint(entry, table["cancel"], "http.cancel", keyed, mutation=True)
    if decl.get("cancellable", False) and cancel is None:
        raise entry.error("http.cancel", "required when cancellable = true")
    retryable = table.get("retryable", sorted(DEFAULT_RETRYABLE))
    if not isinstance(retryable, list) or not all(
        isinstance(s, int) and 400 <= s <= 599 for s in retryable
    ):
        raise entry.error("http.retryable", "must be a list of HTTP statuses 400-599")
    states = States()
    if "status" in table:
        st = _table(entry, table["status"], "http.status", _STATUS)
        states = States(
            field=_typed(entry, st, "field", str, states.field),
            pending=_strings(entry, st, "pending", states.pending),
            failed=_strings(entry, st, "failed", states.failed),
            cancelled=_strings(entry, st, "cancelled", states.cancelled),
        )
    callbacks = None
    if "callback" in table:
        cb = _table(entry, table["callback"], "http.callback", _CALLBACK)
        secret_env = cb.get("secret_env")
        if not isinstance(secret_env, str) or not secret_env:
            raise entry.error(
                "http.callback.secret_env", "required: the variable holding the secret"
            )
        secret = os.environ.get(secret_env, "")
        if not secret:
            raise entry.error(
                "http.callback.secret_env", f"environment variable {secret_env} is not set"
            )
        header = cb.get("signature_header")
        if not isinstance(header, str) or not _HEADER.match(header):
            raise entry.error("http.callback.signature_header", "required: a header name")
        stamp = cb.get("timestamp_header")
        if stamp is not None and (not isinstance(stamp, str) or not _HEADER.match(stamp)):
            raise entry.error("http.callback.timestamp_header", "must be a header name")
        callbacks = Callbacks(
            secret=secret.encode(),
            signature_header=header,
            timestamp_header=stamp,
            key_field=_typed(entry, cb, "key_field", str, "idempotency_key"),
            result_field=_typed(entry, cb, "result_field", str, ""),
        )
    return HttpSpec(
        execute=execute,
        lookup=lookup,
        cancel=cancel,
        retryable=frozenset(retryable),
        states=states,
        id_field=_typed(entry, table, "id_field", str, "id"),
        callbacks=callbacks,
    )


def _template_fn(
    entry: _Entry, raw: Mapping[str, Any], field: str, arguments: set[str], *, result: bool
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


def _roles(
    entry: _Entry, raw: Mapping[str, Any], names: set[str]
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


def parse_entry(
    path: Path, index: int, raw: Any, client: HttpClient | None
) -> tuple[ToolDeclaration, HttpExecutor | None]:
    """One `[[tools]]` entry → its declaration (and executor when a client is given)."""
    entry = _Entry(path, index, raw if isinstance(raw, dict) else {})
    raw = _table(entry, raw, "", _TOP)
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        shape = "lowercase letters, digits and _, starting with a letter (max 64)"
        raise entry.error("name", f"must be {shape}" if name is not None else f"required: {shape}")
    description = raw.get("description")
    if not isinstance(description, str) or not description.strip():
        raise entry.error("description", "required: what the tool does, for the model")
    batch_field = _typed(entry, raw, "batch_field", str, None)
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
        item_field = _typed(entry, raw, "item_field", str, batch_field)
        schema = {
            "type": "object",
            "properties": {item_field: array.get("items")},
            "required": [item_field],
        }
    arguments = arguments_struct(entry, name, schema)
    names = set(argument_types(arguments))
    roles, subject_key = _roles(entry, raw, names)
    for field, choices in _CHOICES.items():
        if field in raw and raw[field] not in choices:
            raise entry.error(field, f"{raw[field]!r} is not one of {', '.join(choices)}")
    limits_raw = _table(entry, raw.get("limits", {}), "limits", _LIMITS)
    limits = Limits()
    try:
        limits = Limits(**{k: _typed(entry, limits_raw, k, int, None) for k in limits_raw})
    except TypeError as exc:
        raise entry.error("limits", str(exc)) from None
    agents = raw.get("agents")
    if agents is not None and (
        not isinstance(agents, list) or not all(isinstance(a, str) for a in agents)
    ):
        raise entry.error("agents", "must be a list of agent names")
    label = _template_fn(entry, raw, "label", names, result=False)
    closing = _template_fn(entry, raw, "closing", names, result=True)
    http = _http(entry, raw.get("http"), names, raw)
    owned = raw.get("owned_values", [])
    if not isinstance(owned, list) or not all(isinstance(o, str) for o in owned):
        raise entry.error("owned_values", "must be a list of strings")
    defaults = ToolDeclaration(name=name, description="", arguments=arguments, executor="")
    declaration = ToolDeclaration(
        name=name,
        description=description.strip(),
        arguments=arguments,
        executor=f"http.{name}",
        batch_field=batch_field,
        item_field=item_field,
        max_batch=_typed(entry, raw, "max_batch", int, defaults.max_batch),
        idempotent=_typed(entry, raw, "idempotent", bool, True),
        cancellable=_typed(entry, raw, "cancellable", bool, False),
        needs_confirmation=_typed(entry, raw, "needs_confirmation", bool, False),
        subject_key_fields=tuple(subject_key),
        owner=raw.get("owner", defaults.owner),
        read_only=_typed(entry, raw, "read_only", bool, False),
        max_attempts=_typed(entry, raw, "max_attempts", int, defaults.max_attempts),
        backoff_base_s=_typed(entry, raw, "backoff_base_s", float, defaults.backoff_base_s),
        backoff_max_s=_typed(entry, raw, "backoff_max_s", float, defaults.backoff_max_s),
        attempt_timeout_s=_typed(
            entry, raw, "attempt_timeout_s", float, defaults.attempt_timeout_s
        ),
        deadline_s=_typed(entry, raw, "deadline_s", float, defaults.deadline_s),
        priority=raw.get("priority", defaults.priority),
        duplicate_policy=raw.get("duplicate_policy", defaults.duplicate_policy),
        limits=limits,
        overflow=raw.get("overflow", defaults.overflow),
        business=BusinessLimits(
            max_amount=_typed(entry, raw, "max_amount", int, None),
            max_per_user_per_hour=_typed(entry, raw, "max_per_user_per_hour", int, None),
        ),
        agents=frozenset(agents) if agents is not None else None,
        roles=dict(roles),
        owned_values=frozenset(owned),
        open=_typed(entry, raw, "open", bool, False),
        label=label.render if label else None,
        closing=_render_closing(closing) if closing else None,
    )
    found = problems(declaration)
    if found:
        raise entry.error("declaration", "; ".join(found))
    return declaration, HttpExecutor(http, client) if client is not None else None


def load_tools_file(path: str, registry: ToolRegistry, client: HttpClient | None) -> None:
    """Read, check and register every tool of the file; raise naming the first problem."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DeclarationError(f"HOLDLINE_TOOLS_FILE {file}: cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise DeclarationError(f"{file}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - {"tools"})
    if unknown:
        raise DeclarationError(f"{file}: {unknown[0]}: unknown top-level field (only [[tools]])")
    tools = data.get("tools")
    if not isinstance(tools, list) or not tools:
        raise DeclarationError(f"{file}: no [[tools]] entries")
    for index, raw in enumerate(tools):
        declaration, executor = parse_entry(file, index, raw, client)
        try:
            registry.declare(declaration, origin=f"{file}: tools[{index}]")
        except DeclarationError as exc:
            raise DeclarationError(
                f"{file}: tools[{index}] ({declaration.name!r}): name: {exc}"
            ) from None
        if executor is not None:
            registry.register_executor(declaration.executor, executor)
