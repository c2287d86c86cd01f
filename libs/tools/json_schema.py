"""A JSON Schema object as a msgspec type: the arguments a tool accepts, validated by msgspec.

The supported subset is the one a tool's parameters need (an object of string, integer,
number, boolean and array properties with their bounds, `enum`, `required` and defaults;
a property may be nullable, as `type = ["integer", "null"]` or `anyOf` of one schema and
`{type = "null"}`);
any other keyword is refused, not ignored, so a schema never promises a check that is not
made. Where the schema comes from (a tools file, a tool server) is the caller's business:
`SchemaError` names the offending field relative to the schema's root.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

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
_ARRAY_KEYS = {"type", "description", "default", "items", "minItems", "maxItems"}
_OBJECT_KEYS = {"type", "properties", "required", "additionalProperties", "description"}
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
_ARGUMENT = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")


class SchemaError(ValueError):
    """A schema outside the supported subset; `field` is its path ("" for the root)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


_NULL = {"type": "null"}


def _nullable(field: str, schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema of a given value, and whether null is allowed too."""
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1 or len(kind) != 2:
            raise SchemaError(f"{field}.type", 'a list of types must be one type and "null"')
        return {**schema, "type": kinds[0]}, True
    if "anyOf" in schema:
        options = schema["anyOf"]
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        others = [o for o in options if o != _NULL] if isinstance(options, list) else []
        if not isinstance(options, list) or len(options) != 2 or len(others) != 1:
            raise SchemaError(
                f"{field}.anyOf", 'only one schema and {type = "null"} are supported'
            )
        if not isinstance(others[0], dict) or set(rest) & set(others[0]):
            raise SchemaError(f"{field}.anyOf", "must be a JSON Schema object, not repeated")
        return {**rest, **others[0]}, True
    return schema, False


def _property(field: str, schema: Any) -> Any:
    if not isinstance(schema, dict):
        raise SchemaError(field, "must be a JSON Schema object")
    schema, nullable = _nullable(field, schema)
    kind = _value_type(field, schema)
    return kind | None if nullable else kind


def _value_type(field: str, schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    if kind == "array":
        unknown = sorted(set(schema) - _ARRAY_KEYS)
        if unknown:
            raise SchemaError(f"{field}.{unknown[0]}", "not a supported JSON Schema keyword")
        item = _property(f"{field}.items", schema.get("items"))
        return _annotate(field, list[item], schema)  # type: ignore[valid-type]
    if kind not in _SCALAR_KEYS:
        raise SchemaError(
            f"{field}.type", f"{kind!r} is not one of string, integer, number, boolean, array"
        )
    unknown = sorted(set(schema) - _SCALAR_KEYS[kind])
    if unknown:
        raise SchemaError(f"{field}.{unknown[0]}", f"not a supported keyword for {kind}")
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{field}.enum", "must be a non-empty list")
        if not all(isinstance(v, _PY[kind]) and not isinstance(v, bool) for v in values):
            raise SchemaError(f"{field}.enum", f"every value must be a {kind}")
        return _annotate(field, Literal[tuple(values)], schema)
    return _annotate(field, _PY[kind], schema)


def _annotate(field: str, base: Any, schema: Mapping[str, Any]) -> Any:
    meta = {_META[k]: v for k, v in schema.items() if k in _META}
    if "enum" in schema:
        meta = {k: v for k, v in meta.items() if k == "description"}
    if not meta:
        return base
    try:
        return Annotated[base, msgspec.Meta(**meta)]
    except (TypeError, ValueError) as exc:
        raise SchemaError(field, str(exc)) from None


def struct_of_schema(name: str, schema: Any) -> type[Any]:
    """A frozen msgspec struct named `<name>_arguments` for a JSON Schema object.

    Unknown arguments are refused; an optional property without a default is None.
    """
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise SchemaError("", 'must be a JSON Schema object (type = "object")')
    unknown = sorted(set(schema) - _OBJECT_KEYS)
    if unknown:
        raise SchemaError(unknown[0], "not a supported JSON Schema keyword")
    if schema.get("additionalProperties", False) is not False:
        raise SchemaError("additionalProperties", "only false is supported")
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict):
        raise SchemaError("properties", "must be a table")
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise SchemaError("required", "must be a list of argument names")
    missing = [r for r in required if r not in properties]
    if missing:
        raise SchemaError("required", f"{missing[0]!r} is not a property")
    fields: list[Any] = []
    for arg, prop in properties.items():
        where = f"properties.{arg}"
        if not _ARGUMENT.match(arg):
            raise SchemaError(where, "not a valid argument name")
        kind = _property(where, prop)
        if arg in required:
            fields.append((arg, kind))
        elif "default" in prop:
            default = prop["default"]
            try:
                msgspec.convert(default, kind)
            except msgspec.ValidationError as exc:
                raise SchemaError(f"{where}.default", str(exc)) from None
            if isinstance(default, list):
                # A list default is copied for each call, never shared.
                fields.append((arg, kind, msgspec.field(default_factory=default.copy)))
            else:
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
