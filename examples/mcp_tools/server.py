"""A small support desk served over MCP (FastMCP), with its own ledger of effects.

`open_ticket` opens one ticket per idempotency key (read from the request's `_meta`
`io.holdline/idempotency-key`), `find_ticket_by_key` is its lookup tool, and
`export_history` runs as a task (the tasks extension), reporting progress. The ledger is a
JSON-lines file (`MCP_DESK_LEDGER`, default `mcp-desk-ledger.jsonl`): one line per effect.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp_tasks import TasksExtension

LEDGER = Path(os.environ.get("MCP_DESK_LEDGER", "mcp-desk-ledger.jsonl"))
KEY = "io.holdline/idempotency-key"

desk = FastMCP("support-desk")
desk.add_extension(TasksExtension())


def _ledger() -> list[dict[str, Any]]:
    if not LEDGER.exists():
        return []
    return [json.loads(line) for line in LEDGER.read_text().splitlines() if line.strip()]


def _record(entry: dict[str, Any]) -> None:
    with LEDGER.open("a", encoding="utf-8") as ledger:
        ledger.write(json.dumps(entry) + "\n")


@desk.tool
async def open_ticket(customer: str, subject: str, ctx: Context) -> dict[str, Any]:
    """Open a support ticket for a customer."""
    meta = ctx.request_context.meta if ctx.request_context is not None else None
    key = meta.get(KEY) if isinstance(meta, dict) else None
    for entry in _ledger():
        if key is not None and entry["key"] == key:
            return entry  # the same intent again: the same ticket, no second effect
    entry = {
        "key": key,
        "id": f"T-{len(_ledger()) + 1}",
        "customer": customer,
        "subject": subject,
    }
    _record(entry)
    return entry


@desk.tool
async def find_ticket_by_key(key: str) -> dict[str, Any] | None:
    """The ticket opened under an idempotency key, or nothing."""
    return next((e for e in _ledger() if e["key"] == key), None)


@desk.tool(task=True)
async def export_history(customer: str, ctx: Context) -> dict[str, Any]:
    """Export a customer's ticket history (a long task)."""
    for part in range(3):
        await ctx.report_progress(part, 3, f"exported {part} of 3 parts")
        await asyncio.sleep(2)
    tickets = [e["id"] for e in _ledger() if e["customer"] == customer]
    return {"customer": customer, "tickets": len(tickets)}


def main() -> None:
    """Serve over Streamable HTTP on 127.0.0.1:MCP_DESK_PORT (8096), or over stdio."""
    if "--stdio" in sys.argv[1:]:
        desk.run(show_banner=False)
        return
    port = int(os.environ.get("MCP_DESK_PORT", "8096"))
    desk.run(transport="http", host="127.0.0.1", port=port, show_banner=False)


if __name__ == "__main__":
    main()
