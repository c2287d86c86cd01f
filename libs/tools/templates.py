"""`{field}` templates over a tool's arguments and its result: URLs, labels, closings.

A field is an argument name, `idempotency_key`, or `result.<path>` into the result JSON.
`{{` and `}}` stand for literal braces. Fields are parsed once, so a template naming a field
that cannot exist is refused at start, not when the first operation renders it.

In a URL, fields may fill the path and the query only (`origin_fields` finds the others), and
a value that would change which resource is named (`.`, `..`, a `/` in the path) is refused
when rendering. Errors name the field, never its value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

_FIELD = re.compile(r"\{([^{}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_-]+)*$")
_OPEN, _CLOSE = "\x00", "\x01"
# Scheme and authority of an absolute URL: where no field may stand.
_ORIGIN = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")
_DOT_SEGMENTS = frozenset({".", ".."})


class TemplateError(ValueError):
    """A template that cannot be parsed, or a field with no value when it is rendered."""


class Template:
    """A parsed template: its text and the fields it names."""

    def __init__(self, text: str) -> None:
        self.text = text
        escaped = text.replace("{{", _OPEN).replace("}}", _CLOSE)
        if "{" in _FIELD.sub("", escaped) or "}" in _FIELD.sub("", escaped):
            raise TemplateError(f"unbalanced brace in {text!r}")
        names = _FIELD.findall(escaped)
        for name in names:
            if not _NAME.match(name):
                raise TemplateError(f"{{{name}}} is not a field name")
        self._escaped = escaped
        self.fields: tuple[str, ...] = tuple(names)

    def unknown(self, allowed: set[str], *, result: bool) -> list[str]:
        """Fields that are neither in `allowed` nor (when `result`) a `result.` path."""
        return [
            f for f in self.fields if f not in allowed and not (result and f.startswith("result."))
        ]

    def origin_fields(self) -> list[str]:
        """Fields in the scheme or host of a URL template (none may be there)."""
        origin = _ORIGIN.match(self._escaped)
        head = origin[0] if origin else self._escaped.split("/", 1)[0]
        return _FIELD.findall(head)

    def render(self, values: Mapping[str, Any], *, url: bool = False) -> str:
        """The text with every field filled in (percent-encoded when `url`, where a dot
        segment, or a `/` in the path, is a TemplateError naming the field)."""
        query_at = self._escaped.find("?")

        def fill(match: re.Match[str]) -> str:
            value = _resolve(values, match[1])
            text = str(value)
            if not url:
                return text
            if text in _DOT_SEGMENTS:
                raise TemplateError(f"the value of {{{match[1]}}} is a dot segment")
            in_path = query_at < 0 or match.start() < query_at
            if in_path and ("/" in text or "\\" in text):
                raise TemplateError(f"the value of {{{match[1]}}} holds a '/' (it fills the path)")
            return quote(text, safe="")

        rendered = _FIELD.sub(fill, self._escaped)
        return rendered.replace(_OPEN, "{").replace(_CLOSE, "}")


def _resolve(values: Mapping[str, Any], name: str) -> Any:
    head, *path = name.split(".")
    if head not in values:
        raise TemplateError(f"no value for {{{name}}}")
    value: Any = values[head]
    for part in path:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        else:
            raise TemplateError(f"no value for {{{name}}}")
    if value is None or isinstance(value, Mapping | list):
        raise TemplateError(f"{{{name}}} is not a plain value")
    return value


def dig(data: Any, path: str) -> Any:
    """A dotted path into JSON (None when any step is missing); "" is the whole value."""
    if not path:
        return data
    for part in path.split("."):
        if not isinstance(data, Mapping) or part not in data:
            return None
        data = data[part]
    return data
