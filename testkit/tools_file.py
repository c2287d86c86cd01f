"""A valid tools file (one HTTP tool) and a writer: what the bad-file tests start from."""

from __future__ import annotations

from pathlib import Path

GOOD = """
[[tools]]
name = "open_ticket"
description = "Open a ticket."
closing = "Ticket {result.id} is open."
[tools.parameters]
type = "object"
required = ["project", "title"]
[tools.parameters.properties.project]
type = "string"
[tools.parameters.properties.title]
type = "string"
[tools.roles]
project = "resource"
[tools.http]
execute = { url = "http://127.0.0.1:9/tickets", idempotency_header = "X-Request-Token" }
lookup = { url = "http://127.0.0.1:9/tickets/by-token/{idempotency_key}" }
"""


def tools_file(tmp_path: Path, text: str) -> Path:
    """Write `text` as the tools file of a test; its path."""
    path = tmp_path / "tools.toml"
    path.write_text(text)
    return path
