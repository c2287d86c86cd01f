"""A JSON Schema object as a msgspec struct, on its own (no tools file, no HTTP): the
reusable part a tool source of any kind builds its arguments type with."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from libs.tools.json_schema import SchemaError, struct_of_schema

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["project", "seats"],
    "properties": {
        "project": {"type": "string", "minLength": 2},
        "seats": {"type": "integer", "minimum": 1, "maximum": 8},
        "tier": {"type": "string", "enum": ["free", "paid"], "default": "free"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    },
}


def test_the_struct_validates_as_the_schema_says() -> None:
    struct = struct_of_schema("open_ticket", SCHEMA)
    assert struct.__name__ == "open_ticket_arguments"
    ok = msgspec.convert({"project": "web", "seats": 3}, struct)
    expected = {"project": "web", "seats": 3, "tier": "free", "tags": None}
    assert msgspec.structs.asdict(ok) == expected
    for bad in (
        {"project": "w", "seats": 3},
        {"project": "web", "seats": 9},
        {"project": "web", "seats": 3, "tier": "gold"},
        {"project": "web", "seats": 3, "tags": ["a", "b", "c"]},
        {"project": "web", "seats": 3, "other": 1},
        {"seats": 3},
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, struct)


@pytest.mark.parametrize(
    ("schema", "field", "problem"),
    [
        ({"type": "array"}, "", 'must be a JSON Schema object (type = "object")'),
        ({"type": "object", "oneOf": []}, "oneOf", "not a supported JSON Schema keyword"),
        (
            {"type": "object", "required": ["x"], "properties": {}},
            "required",
            "'x' is not a property",
        ),
        (
            {"type": "object", "properties": {"x": {"type": "string", "format": "email"}}},
            "properties.x.format",
            "not a supported keyword for string",
        ),
        (
            {"type": "object", "properties": {"x": {"type": "integer", "default": "one"}}},
            "properties.x.default",
            "Expected `int`, got `str`",
        ),
    ],
)
def test_a_schema_outside_the_subset_names_its_field(
    schema: dict[str, Any], field: str, problem: str
) -> None:
    with pytest.raises(SchemaError) as refused:
        struct_of_schema("t", schema)
    assert refused.value.field == field
    assert refused.value.problem == problem
