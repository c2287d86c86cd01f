"""The services' JSON responses, encoded by msgspec.

Starlette's `JSONResponse` encodes with the standard library's `json`: a chat session's
snapshot, tens of KB once it has had a few turns, took ~0.24 ms of CPU to encode where
msgspec takes ~0.03 (docs/journal/2026-12-06-json-answers-by-msgspec.md). What the routes return
(dicts, lists, strings, numbers, booleans, None) encodes to the same compact UTF-8 text,
keys in their insertion order.
"""

from __future__ import annotations

from typing import Any

import msgspec
from starlette.responses import JSONResponse as _StarletteJSON


class JSONResponse(_StarletteJSON):
    """`application/json` (or the media type given), the body encoded by msgspec."""

    def render(self, content: Any) -> bytes:
        return msgspec.json.encode(content)
