"""Explicit tool calls for the mock model: "call open_ticket with customer=ana, subject=jam".

The mock model understands the demo tools' phrasings only; this lets any declared tool (a
tools file's HTTP or MCP tools beside the demo) be called from a chat turn, its arguments
given by name and read against the tool's JSON Schema (integers and booleans where the schema
says so). Anything else is left to the phrase readers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from libs.models.interface import ToolSpec

_CALL_RE = re.compile(
    r"^\s*(?:please\s+)?(?:call|use|run)\s+(?P<tool>[a-z_][a-z0-9_]*)"
    r"(?:\s+with\s+(?P<args>.+?))?\s*[.!]?\s*$",
    re.IGNORECASE | re.DOTALL,
)
_PAIR_RE = re.compile(r"^\s*(?P<key>[A-Za-z_][A-Za-z0-9_]*)\s*[=:]\s*(?P<value>.*?)\s*$")


def explicit_call(text: str, tools: Sequence[ToolSpec]) -> tuple[str, dict[str, Any]] | None:
    """The tool and arguments an explicit call names, or None when the text is not one (an
    unknown tool or a malformed argument list is not one either: the readers get the text)."""
    match = _CALL_RE.match(text)
    if match is None:
        return None
    spec = next((t for t in tools if t.name == match["tool"]), None)
    if spec is None:
        return None
    arguments: dict[str, Any] = {}
    for raw in re.split(r",|;|\s+and\s+", match["args"] or ""):
        if not raw.strip():
            continue
        pair = _PAIR_RE.match(raw)
        if pair is None:
            return None
        arguments[pair["key"]] = _typed(pair["value"].strip("'\""), spec, pair["key"])
    return spec.name, arguments


def _typed(value: str, spec: ToolSpec, key: str) -> Any:
    schema = spec.parameters.get("properties", {}).get(key, {})
    kinds = schema.get("type", "string")
    kinds = set(kinds) if isinstance(kinds, list) else {kinds}
    if "integer" in kinds and re.fullmatch(r"-?\d+", value):
        return int(value)
    if "boolean" in kinds and value.lower() in ("true", "false", "yes", "no"):
        return value.lower() in ("true", "yes")
    if "array" in kinds:
        return [v.strip() for v in value.split("/") if v.strip()]
    return value
