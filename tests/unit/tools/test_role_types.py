"""Role checks accept what users write: optional, nullable and defaulted role-bearing
arguments, in every spelling the tools-file converter accepts, and admission enforces the
role whenever a value is given (Hypothesis properties over generated schemas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.admission.rules import business_limits, check_item
from libs.tools import Caller, DeclarationError
from libs.tools.http_file import parse_entry

CALLER = Caller(tenant_id="acme", user_id="ana", agent="concierge")
MAX_AMOUNT = 1000
HTTP = {
    "execute": {"url": "http://127.0.0.1:9/things"},
    "lookup": {"url": "http://127.0.0.1:9/things/{idempotency_key}"},
}
# The value types each role fits, as JSON Schema (an amount: integers; names: strings or
# lists of strings; text: strings).
FITTING: dict[str, list[dict[str, Any]]] = {
    "amount": [{"type": "integer"}, {"type": "integer", "minimum": 1}],
    "resource": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    "owned": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
    "text": [{"type": "string"}, {"type": "string", "maxLength": 200}],
}
NOT_FITTING: dict[str, list[tuple[dict[str, Any], str]]] = {
    "amount": [({"type": "number"}, "a number"), ({"type": "string"}, "a string")],
    "resource": [
        ({"type": "integer"}, "an integer"),
        ({"type": "array", "items": {"type": "integer"}}, "a list of integers"),
    ],
    "owned": [({"type": "boolean"}, "a boolean")],
    "text": [({"type": "array", "items": {"type": "string"}}, "a list of strings")],
}
DEFAULTS = {"integer": 5, "string": "x", "array": ["x"]}


def _spelled(base: dict[str, Any], how: str) -> dict[str, Any]:
    """One of the ways a user writes that type: plain, nullable as a list or an anyOf."""
    if how == "list":
        return {**base, "type": [base["type"], "null"]}
    if how == "any_of":
        return {"anyOf": [base, {"type": "null"}], "description": "maybe"}
    return dict(base)


@st.composite
def fitting_arguments(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str], set[str]]:
    """Properties (each role at most once, as admission's one-amount rule wants), their roles,
    and which are required."""
    roles = draw(st.lists(st.sampled_from(sorted(FITTING)), min_size=1, max_size=4, unique=True))
    properties: dict[str, Any] = {}
    required: set[str] = set()
    for role in roles:
        name = f"{role}_arg"
        base = draw(st.sampled_from(FITTING[role]))
        how = draw(st.sampled_from(["plain", "list", "any_of"]))
        prop = _spelled(base, how)
        if how == "plain" and draw(st.booleans()):
            prop["default"] = DEFAULTS[base["type"]]
        if draw(st.booleans()):
            required.add(name)
        properties[name] = prop
    return properties, {f"{r}_arg": r for r in roles}, required


def _entry(properties: dict[str, Any], roles: dict[str, str], required: set[str]) -> Any:
    raw: dict[str, Any] = {
        "name": "thing",
        "description": "Do a thing.",
        "parameters": {"type": "object", "properties": properties, "required": sorted(required)},
        "roles": roles,
        "http": HTTP,
    }
    if "amount" in roles.values():
        raw["max_amount"] = MAX_AMOUNT
    declaration, _ = parse_entry(Path("tools.toml"), 0, raw, None)
    return declaration


@settings(max_examples=150, deadline=None)
@given(fitting_arguments())
def test_every_role_compatible_schema_is_accepted(
    drawn: tuple[dict[str, Any], dict[str, str], set[str]],
) -> None:
    properties, roles, required = drawn
    declaration = _entry(properties, roles, required)
    assert declaration.roles == roles


def _good(role: str, listed: bool) -> Any:
    value = {"amount": 700, "resource": "acme/github", "owned": "ana:main", "text": " hi "}[role]
    return [value] if listed else value


def _bad(role: str, listed: bool) -> tuple[Any, str] | None:
    value, reason = {
        "amount": (MAX_AMOUNT + 1, "over_limit"),
        "resource": ("globex/github", "forbidden"),
        "owned": ("bob:main", "forbidden"),
    }.get(role, (None, ""))
    if value is None:
        return None
    return ([ "github", value] if listed else value), reason


def _admit(declaration: Any, item: dict[str, Any]) -> tuple[str, str] | dict[str, Any]:
    checked = check_item(declaration, item, CALLER)
    if isinstance(checked, tuple):
        return checked
    limited = business_limits(declaration, checked, 0)
    return limited if limited is not None else checked


@settings(max_examples=150, deadline=None)
@given(fitting_arguments(), st.data())
def test_admission_enforces_each_role_when_a_value_is_given(
    drawn: tuple[dict[str, Any], dict[str, str], set[str]], data: st.DataObject
) -> None:
    properties, roles, required = drawn
    declaration = _entry(properties, roles, required)

    def listed(name: str) -> bool:
        prop = properties[name]
        kind = prop["anyOf"][0]["type"] if "anyOf" in prop else prop["type"]
        return "array" in (kind if isinstance(kind, list) else [kind])

    # Optional values left out or null, required ones good: admitted.
    item: dict[str, Any] = {}
    for name, role in roles.items():
        if name in required:
            item[name] = _good(role, listed(name))
        elif "default" not in properties[name] and data.draw(st.booleans()):
            nullable = "anyOf" in properties[name] or isinstance(properties[name]["type"], list)
            if nullable:
                item[name] = None
    admitted = _admit(declaration, item)
    assert isinstance(admitted, dict), admitted
    # Each value given is checked: a bad one is refused with its role's reason.
    for name, role in roles.items():
        bad = _bad(role, listed(name))
        if bad is None:
            continue
        value, reason = bad
        refused = _admit(declaration, {**item, name: value})
        assert isinstance(refused, tuple), (name, value, refused)
        assert refused[0] == reason
        assert name in refused[1]


@pytest.mark.parametrize("role", sorted(NOT_FITTING))
@pytest.mark.parametrize("how", ["plain", "list", "any_of"])
def test_the_message_names_the_real_problem(role: str, how: str) -> None:
    for base, words in NOT_FITTING[role]:
        if how != "plain" and base["type"] == "array" and role == "text":
            continue
        with pytest.raises(DeclarationError) as refused:
            _entry({"arg": _spelled(base, how)}, {"arg": role}, set())
        message = str(refused.value)
        assert "'arg' is" in message
        assert f"it may be {words}" in message
        assert "null" not in message.split("it may be")[1]


def test_an_optional_amount_is_an_integer_amount() -> None:
    """The file the issue quotes: `budget = { type = "integer" }` left out of `required`."""
    declaration = _entry({"budget": {"type": "integer"}}, {"budget": "amount"}, set())
    assert _admit(declaration, {}) == {"budget": None}
    assert _admit(declaration, {"budget": 999}) == {"budget": 999}
    assert _admit(declaration, {"budget": MAX_AMOUNT + 1})[0] == "over_limit"  # type: ignore[index]
