"""Start-up checks of a declaration: what it says admission enforces must be enforceable.

A tool that takes names, accounts or amounts and declares no roles would pass admission with
no tenant, ownership or limit check at all; it is refused here, before anything runs, with a
message that says what to declare.
"""

from __future__ import annotations

from typing import Any

import msgspec

from .declaration import ROLES, ToolDeclaration


class DeclarationError(ValueError):
    """A declaration, a tools file or a tool module that holdline refuses to start with."""


def _unwrap(info: Any) -> Any:
    while isinstance(info, msgspec.inspect.Metadata):
        info = info.type
    return info


def argument_types(arguments: type[Any]) -> dict[str, Any]:
    """Each argument of a declaration's schema and its msgspec type info."""
    info = _unwrap(msgspec.inspect.type_info(arguments))
    if not isinstance(info, msgspec.inspect.StructType):
        raise DeclarationError(f"arguments must be a msgspec.Struct type, not {arguments!r}")
    return {f.name: _unwrap(f.type) for f in info.fields}


def _names_something(info: Any) -> bool:
    """A string or integer argument (or a list of them) could name a resource or an amount."""
    if isinstance(info, msgspec.inspect.ListType | msgspec.inspect.SetType):
        return _names_something(_unwrap(info.item_type))
    return isinstance(info, msgspec.inspect.StrType | msgspec.inspect.IntType)


def _present(info: Any) -> list[Any]:
    """The types a value may have when it is given: a union's members but null, unwrapped."""
    if isinstance(info, msgspec.inspect.UnionType):
        return [_unwrap(t) for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
    return [info]


def _literal_of(info: Any, kind: type) -> bool:
    return isinstance(info, msgspec.inspect.LiteralType) and all(
        isinstance(v, kind) and not isinstance(v, bool) for v in info.values
    )


def _is_int(info: Any) -> bool:
    return isinstance(info, msgspec.inspect.IntType) or _literal_of(info, int)


def _is_str(info: Any) -> bool:
    return isinstance(info, msgspec.inspect.StrType) or _literal_of(info, str)


def _is_names(info: Any) -> bool:
    """A string, or a list or set of strings (several resources or values at once)."""
    if isinstance(info, msgspec.inspect.ListType | msgspec.inspect.SetType):
        return _is_str(_unwrap(info.item_type))
    return _is_str(info)


# What each role needs of the value when one is given (null and absence are always fine:
# admission checks what is there), and how the message says it.
_ROLE_TYPES = {
    "amount": (_is_int, "an integer"),
    "resource": (_is_names, "a string or a list of strings"),
    "owned": (_is_names, "a string or a list of strings"),
    "text": (_is_str, "a string"),
}


def _describe(info: Any) -> str:
    """A type in the words of a message: "a number", "a list of integers"."""
    if isinstance(info, msgspec.inspect.ListType | msgspec.inspect.SetType):
        item = _describe(_unwrap(info.item_type)).split(" ", 1)[-1]
        return f"a list of {item}s"
    if isinstance(info, msgspec.inspect.LiteralType):
        return "one of " + ", ".join(repr(v) for v in info.values)
    name = type(info).__name__.removesuffix("Type").lower()
    words = {"int": "an integer", "str": "a string", "float": "a number", "bool": "a boolean"}
    return words.get(name, f"a {name}")


def role_problem(argument: str, role: str, info: Any) -> str | None:
    """Why `argument`'s type does not fit its role, or None when it does.

    Optional and nullable arguments fit (`int | None`, a JSON Schema `["integer", "null"]`,
    a default): only the types a given value may have are checked, each of them.
    """
    fits, wanted = _ROLE_TYPES[role]
    wrong = [t for t in _present(info) if not fits(t)]
    if not wrong:
        return None
    what = {"amount": "an amount", "owned": "an owned value"}.get(role, f"a {role}")
    return (
        f"roles: {argument!r} is {what}, so the schema must make it {wanted}; "
        f"it may be {' or '.join(_describe(t) for t in wrong)}"
    )


def problems(declaration: ToolDeclaration) -> list[str]:
    """Everything wrong with one declaration (empty when it may be registered)."""
    d = declaration
    try:
        fields = argument_types(d.arguments)
    except DeclarationError as exc:
        return [str(exc)]
    found: list[str] = []
    for argument, role in d.roles.items():
        if argument not in fields:
            found.append(f"roles: argument {argument!r} is not in the schema ({_list(fields)})")
        elif role not in ROLES:
            found.append(f"roles: {argument!r} has role {role!r}; roles are {', '.join(ROLES)}")
        elif (problem := role_problem(argument, role, fields[argument])) is not None:
            found.append(problem)
    amounts = [a for a, r in d.roles.items() if r == "amount"]
    if len(amounts) > 1:
        found.append(f"roles: one amount argument per tool, not {', '.join(amounts)}")
    if d.business.max_amount is not None and not amounts:
        found.append("business.max_amount needs an argument with role 'amount' to bound")
    if d.owned_values and "owned" not in d.roles.values():
        found.append("owned_values needs an argument with role 'owned'")
    found.extend(
        f"normalisers: argument {a!r} is not in the schema"
        for a in d.normalisers
        if a not in fields
    )
    found.extend(
        f"subject_key: argument {a!r} is not in the schema"
        for a in d.subject_key_fields
        if a not in fields
    )
    if (d.batch_field is None) != (d.item_field is None):
        found.append("batch_field and item_field go together")
    elif d.item_field is not None and d.item_field not in fields:
        found.append(f"item_field {d.item_field!r} is not in the schema")
    if d.max_attempts < 1:
        found.append("max_attempts must be at least 1")
    if d.attempt_timeout_s <= 0 or d.deadline_s <= 0:
        found.append("attempt_timeout_s and deadline_s must be positive")
    if d.compensating_tool is not None and d.compensation_arguments is None:
        found.append("compensating_tool needs compensation_arguments")
    # Internal tools get their arguments from a committed operation, never from a model.
    if not d.roles and not d.open and not d.internal:
        named = [a for a, info in fields.items() if _names_something(info)]
        if named:
            found.append(
                f"arguments {_list(named)} could name a resource, an account or an amount, but "
                "the tool declares no roles: declare roles (resource: another tenant's is "
                "refused; owned: must be the caller's; amount: bounded by max_amount; text: "
                "free text) for the arguments admission must check, or declare open=true if "
                "none of them needs a check"
            )
    return found


def _list(names: Any) -> str:
    return ", ".join(repr(n) for n in names) or "no arguments"


def check(declaration: ToolDeclaration) -> None:
    """Raise DeclarationError naming the tool and every problem of its declaration."""
    found = problems(declaration)
    if found:
        raise DeclarationError(f"tool {declaration.name!r}: " + "; ".join(found))
