"""A support desk as a real MCP server (FastMCP), with its own effect ledger, for the tests.

`python -m testkit.mcp_desk` serves Streamable HTTP on `MCP_DESK_PORT` (with `/readyz`), or
stdio when no port is set. Every effect is one line of `MCP_DESK_LEDGER` (JSON), so a test
counts effects per idempotency key whatever happened to the answers. Faults are chosen by
the arguments, so one server serves every scenario:

- `subject` / `text` `"lose-answer"`: commit, then answer only after 30 s (the answer is lost);
- `subject` `"crash-after-commit"`: commit, then the process dies before answering.

`export_history` runs as a task (unless `MCP_DESK_TASKS=0`) of `MCP_DESK_TASK_S` seconds,
reporting progress each second; a cancel is written to the ledger (`kind = "cancel_seen"`).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from fastmcp import Context, FastMCP
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

LEDGER = Path(os.environ.get("MCP_DESK_LEDGER", "mcp-desk-ledger.jsonl"))
TASK_S = float(os.environ.get("MCP_DESK_TASK_S", "3"))
# `MCP_DESK_TASKS=0`: no tasks extension (a server that runs every call in the foreground,
# and starts in a third of the time: the extension's backend is slow to import).
TASKS = os.environ.get("MCP_DESK_TASKS", "1") != "0"

mcp = FastMCP("support-desk")
if TASKS:
    from fastmcp_tasks import TasksExtension

    mcp.add_extension(TasksExtension())


def _key(ctx: Context) -> str | None:
    rc = ctx.request_context
    meta = rc.meta if rc is not None else None
    value = meta.get("io.holdline/idempotency-key") if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def read_ledger(path: Path = LEDGER) -> list[dict[str, Any]]:
    """Every line of a ledger file."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _record(entry: dict[str, Any]) -> None:
    with LEDGER.open("a", encoding="utf-8") as ledger:
        # The server process that made the effect: a restarted stdio server has another.
        ledger.write(json.dumps({**entry, "pid": os.getpid()}) + "\n")
        ledger.flush()
        os.fsync(ledger.fileno())


def _by_key(key: str | None, kind: str) -> dict[str, Any] | None:
    return next(
        (e for e in read_ledger() if key and e.get("key") == key and e["kind"] == kind), None
    )


async def _after_commit(text: str) -> None:
    if text == "lose-answer":
        await asyncio.sleep(30)
    if text == "crash-after-commit":
        os._exit(3)


@mcp.tool
async def open_ticket(customer: str, subject: str, ctx: Context) -> dict[str, Any]:
    """Open a support ticket for a customer."""
    key = _key(ctx)
    existing = _by_key(key, "ticket")
    if existing is not None:
        return existing
    number = sum(e["kind"] == "ticket" for e in read_ledger()) + 1
    entry = {"kind": "ticket", "key": key, "id": f"T-{number}", "customer": customer}
    _record({**entry, "subject": subject})
    await _after_commit(subject)
    return entry


@mcp.tool
async def find_ticket_by_key(key: str) -> dict[str, Any] | None:
    """The ticket opened under an idempotency key, or nothing."""
    found = _by_key(key, "ticket")
    if found is None:
        return None
    return {k: found[k] for k in ("kind", "key", "id", "customer")}


@mcp.tool
async def add_note(customer: str, text: str, ctx: Context) -> dict[str, Any]:
    """Add a note to a customer's file (no lookup: a lost answer stays unknown)."""
    key = _key(ctx)
    _record({"kind": "note", "key": key, "customer": customer, "text": text})
    await _after_commit(text)
    return {"noted": True}


@mcp.tool
async def close_ticket(ticket: str) -> dict[str, Any]:
    """Close a ticket; a ticket that does not exist is an error."""
    if not any(e.get("id") == ticket for e in read_ledger()):
        raise ValueError(f"no ticket {ticket}")
    _record({"kind": "closed", "ticket": ticket})
    return {"closed": ticket}


@mcp.tool
async def big_report(size: int) -> dict[str, Any]:
    """A report of `size` characters (an answer larger than a client should read)."""
    return {"report": "x" * size}


@mcp.tool(
    output_schema={
        "type": "object",
        "properties": {"id": {"type": "integer"}},
        "required": ["id"],
    }
)
async def garbled() -> Any:
    """An answer that breaks the tool's own output schema (garbage to a client)."""
    return {"id": "not a number"}


@mcp.tool(task=TASKS)
async def export_history(customer: str, ctx: Context) -> dict[str, Any]:
    """Export a customer's history (a long task)."""
    steps = max(1, round(TASK_S))
    try:
        for step in range(steps):
            await ctx.report_progress(step, steps, f"exported {step} of {steps} parts")
            await asyncio.sleep(TASK_S / steps)
    except asyncio.CancelledError:
        _record({"kind": "cancel_seen", "customer": customer})
        raise
    _record({"kind": "export", "customer": customer})
    return {"customer": customer, "parts": steps}


@mcp.custom_route("/readyz", methods=["GET"])
async def ready(request: Request) -> Response:
    """Ready once the server listens."""
    return JSONResponse({"ready": True})


def main() -> None:
    """Serve over Streamable HTTP on MCP_DESK_PORT, or over stdio without one."""
    port = os.environ.get("MCP_DESK_PORT")
    if port:
        mcp.run(transport="http", host="127.0.0.1", port=int(port), show_banner=False)
    else:
        mcp.run(show_banner=False)


if __name__ == "__main__":
    main()
