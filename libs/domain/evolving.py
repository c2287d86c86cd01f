"""A copy-with-changes of a frozen, slotted state dataclass, for the folds' hot path.

`dataclasses.replace` goes through `__init__` by keyword and costs ~12 us for the 31 fields
of an operation's state; every event folded in every process pays it, twice with the version
bump. The states folded here have no `__post_init__` and no `init=False` fields, so a copy
of the slots with some values swapped is the object `replace` would build. The copier of
each class is generated once (one line per field, no per-field lookups by name at run
time). An unknown field name is refused, as `replace` refuses it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Copier = Callable[[Any, dict[str, Any]], Any]
_COPIERS: dict[type, tuple[_Copier, frozenset[str]]] = {}


def _copier(cls: type) -> tuple[_Copier, frozenset[str]]:
    fields = dataclasses.fields(cls)
    if hasattr(cls, "__post_init__") or any(not f.init for f in fields):
        raise TypeError(f"{cls.__name__} needs dataclasses.replace")
    body = ["def copy(state, changes):", "    new = new_of(cls)"]
    for f in fields:
        name = f.name
        body.append(
            f"    set_of(new, {name!r}, changes[{name!r}] if {name!r} in changes "
            f"else state.{name})"
        )
    body.append("    return new")
    scope: dict[str, Any] = {"new_of": object.__new__, "set_of": object.__setattr__, "cls": cls}
    exec("\n".join(body), scope)  # noqa: S102 - generated from the class's own field names
    return scope["copy"], frozenset(f.name for f in fields)


def evolved(state: T, **changes: Any) -> T:
    """`dataclasses.replace(state, **changes)` for a frozen slotted state dataclass."""
    cls = type(state)
    found = _COPIERS.get(cls)
    if found is None:
        found = _COPIERS[cls] = _copier(cls)
    copy, known = found
    if not changes.keys() <= known:
        unknown = sorted(changes.keys() - known)
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    new: T = copy(state, changes)
    return new
