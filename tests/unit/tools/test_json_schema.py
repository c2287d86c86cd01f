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


def test_nullable_properties_in_both_spellings() -> None:
    struct = struct_of_schema(
        "t",
        {
            "type": "object",
            "required": ["budget"],
            "properties": {
                # Required but nullable: must be given, may be null.
                "budget": {"type": ["integer", "null"], "minimum": 1},
                "owner": {"anyOf": [{"type": "string"}, {"type": "null"}], "description": "x"},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]},
            },
        },
    )
    given = msgspec.convert({"budget": None, "owner": None}, struct)
    assert msgspec.structs.asdict(given) == {"budget": None, "owner": None, "tags": ["a"]}
    with pytest.raises(msgspec.ValidationError, match="budget"):
        msgspec.convert({"budget": 0}, struct)
    with pytest.raises(msgspec.ValidationError, match="budget"):
        msgspec.convert({}, struct)
    # A list default is never shared between calls.
    first = msgspec.convert({"budget": 1}, struct)
    assert first.tags is not msgspec.convert({"budget": 2}, struct).tags


@pytest.mark.parametrize(
    ("prop", "field"),
    [
        ({"type": ["integer", "string"]}, "properties.a.type"),
        ({"type": ["integer", "null", "null"]}, "properties.a.type"),
        ({"anyOf": [{"type": "integer"}, {"type": "string"}]}, "properties.a.anyOf"),
        ({"anyOf": [{"type": "integer"}]}, "properties.a.anyOf"),
        (
            {"anyOf": [{"type": "integer", "description": "x"}, {"type": "null"}],
             "description": "y"},
            "properties.a.anyOf",
        ),
    ],
)
def test_other_unions_are_refused_naming_the_field(prop: dict[str, Any], field: str) -> None:
    with pytest.raises(SchemaError) as refused:
        struct_of_schema("t", {"type": "object", "properties": {"a": prop}})
    assert refused.value.field == field
