"""What an operation is about, in the user's words: one wording for every plane."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def label_of(tool: str, arguments: Mapping[str, Any]) -> str:
    """ "github", "casa-pepe 2026-12-24 21:00", "50.00 EUR to bob-main"."""
    if "access" in arguments:
        return str(arguments["access"])
    if "restaurant" in arguments:
        when = " ".join(str(arguments[k]) for k in ("date", "time") if k in arguments)
        return f"{arguments['restaurant']} {when}".strip()
    if "to_account" in arguments:
        amount = arguments.get("amount_cents")
        money = ""
        if isinstance(amount, int):
            money = f"{amount / 100:.2f} {arguments.get('currency', '')}".strip()
        return f"{money} to {arguments['to_account']}".strip()
    # Any other tool: its first few scalar arguments, or its name.
    scalars = [
        str(v)
        for k, v in arguments.items()
        if not k.startswith("_") and isinstance(v, str | int | float) and v != ""
    ]
    return " ".join(scalars[:3]) if scalars else tool or "the request"
