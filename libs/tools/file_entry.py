"""Reading one entry of a tools file: error messages that name the file, entry and field.

`FileEntry.error` builds `<file>: tools[<i>] (<name>): <field>: <problem>`; the helpers read a
table (unknown fields refused), a typed value, and `${NAME}` / `${NAME:-default}` from the
environment.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .checks import DeclarationError

_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class FileEntry:
    """Error messages for one entry: `<file>: tools[<i>] (<name>): <field>: <problem>`."""

    def __init__(
        self, path: Path, index: int, raw: Mapping[str, Any], *, within: str = ""
    ) -> None:
        # `within`: the entry's parent, for entries nested in another table
        # (`mcp_servers[0] ('desk').`).
        name = raw.get("name")
        self.where = f"{path}: {within}tools[{index}]" + (
            f" ({name!r})" if isinstance(name, str) else ""
        )

    def error(self, field: str, problem: str) -> DeclarationError:
        return DeclarationError(f"{self.where}: {field}: {problem}")


def read_table(entry: FileEntry, raw: Any, field: str, allowed: frozenset[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise entry.error(field, "must be a table")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise entry.error(
            f"{field}.{unknown[0]}" if field else unknown[0],
            f"unknown field (known: {', '.join(sorted(allowed))})",
        )
    return raw


def read_typed(
    entry: FileEntry, raw: Mapping[str, Any], field: str, kind: type, default: Any
) -> Any:
    value = raw.get(field, default)
    if value is default:
        return value
    ok = isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool))
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if not ok:
        raise entry.error(field, f"must be {kind.__name__}, not {type(value).__name__}")
    return value


def with_env(entry: FileEntry, field: str, text: str) -> str:
    def fill(match: re.Match[str]) -> str:
        value = os.environ.get(match[1])
        if value is None:
            if match[2] is None:
                raise entry.error(field, f"environment variable {match[1]} is not set")
            return match[2]
        return value

    return _ENV.sub(fill, text)
