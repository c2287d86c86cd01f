"""What an operation is about, in the user's words: one wording for every plane.

The declaration says it (`label`); otherwise the values of the arguments it gave a role,
in declaration order, then its first few scalar arguments. No argument is known by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .declaration import ToolDeclaration


def _shown(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool) and value != ""


def label_of(declaration: ToolDeclaration | None, arguments: Mapping[str, Any]) -> str:
    """ "github", "casa-pepe 2026-12-24 21:00", "50.00 EUR to bob-main"."""
    if declaration is not None and declaration.label is not None:
        try:
            label = declaration.label(arguments)
        except (KeyError, TypeError, ValueError):
            label = ""
        if label:
            return label
    if declaration is not None:
        named = [
            str(arguments[a])
            for a, role in declaration.roles.items()
            if role in ("resource", "owned") and _shown(arguments.get(a))
        ]
        if named:
            return " ".join(named)
    scalars = [str(v) for k, v in arguments.items() if not k.startswith("_") and _shown(v)]
    if scalars:
        return " ".join(scalars[:3])
    return declaration.name if declaration is not None else "the request"
