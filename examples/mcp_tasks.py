"""holdline as an MCP server, driven by FastMCP's client with the tasks extension
(`pip install 'fastmcp>=4,<5' fastmcp-tasks`), against `make run`:

    .venv/bin/python examples/mcp_tasks.py --holdline http://127.0.0.1:8080

1. a call answered at once with a task, polled until its closing is the result;
2. a transfer that needs the user's yes: the task asks (elicitation), the answer is given;
3. the first call re-issued on a new connection (as after a lost stream): the same task,
   no second effect; the sandbox provider's ledger shows one effect per intent.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

import fastmcp_tasks  # noqa: F401 - importing it gives FastMCP's client its task support
import httpx
from fastmcp import Client
from fastmcp.client.transports import StreamableHttpTransport
from fastmcp_tasks import call_tool_task


async def say_yes(message: str, _type: Any, _params: Any, _ctx: Any) -> dict[str, Any]:
    """The elicitation handler: a real host asks its user; this one says yes."""
    print(f"  asked: {message!r} -> yes")
    return {"confirmed": True}


def client(url: str, user: str) -> Client[Any]:
    """FastMCP's client on /mcp, identified by static headers (a session opens for it)."""
    headers = {"X-Holdline-User": user, "X-Holdline-Tenant": "acme"}
    transport = StreamableHttpTransport(f"{url}/mcp", headers=headers)
    return Client(transport, elicitation_handler=say_yes)


async def main(url: str, provider: str) -> None:
    """The three steps above."""
    user = f"mcp-{uuid.uuid4().hex[:6]}"
    access = f"github-{uuid.uuid4().hex[:6]}"
    account = f"bob-{uuid.uuid4().hex[:6]}"
    async with client(url, user) as mcp:
        print("tools:", [t.name for t in await mcp.list_tools()])
        task = await call_tool_task(mcp, "provision_access", {"accesses": [access]})
        status = await task.status()
        print(f"1. task {task.task_id}: {status.status} ({status.status_message})")
        result = await task.result()
        print("   result:", result.content[0].text)  # type: ignore[union-attr]
        transfer = await call_tool_task(
            mcp, "transfer_money", {"to_account": account, "amount_cents": 1200}
        )
        print(f"2. task {transfer.task_id}: {(await transfer.status()).status}")
        done = await transfer.result()
        print("   result:", done.content[0].text)  # type: ignore[union-attr]
    async with client(url, user) as again:
        joined = await call_tool_task(again, "provision_access", {"accesses": [access]})
        print(f"3. re-issued: task {joined.task_id} (same: {joined.task_id == task.task_id})")
    async with httpx.AsyncClient(base_url=provider) as http:
        entries = (await http.get("/ledger")).json()["entries"]
    for resource in (access, account):
        count = sum(int(e["effects"]) for e in entries if e["resource"] == resource)
        print(f"   ledger: {resource}: {count} effect(s)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holdline", default="http://127.0.0.1:8080")
    parser.add_argument("--provider", default="http://127.0.0.1:8090")
    args = parser.parse_args()
    asyncio.run(main(args.holdline, args.provider))
