"""The OpenAI Agents SDK's `MCPServerStreamableHttp` pointed at holdline, offline (the
examples' scripted `Model`), against `make run`:

    .venv/bin/python -m examples.mcp_openai_agents --holdline http://127.0.0.1:8080

The agent lists holdline's tools over MCP and calls `provision_access`; the tool's result
is holdline's honest acceptance. The host has no tasks, so the closing goes to the
session's pending updates, which the built-in `holdline_pending` tool returns.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid

from agents import Agent, Runner, set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp

from examples.openai_agents_text import ScriptedModel


async def main(url: str) -> None:
    """One run that calls a tool, then the pending closing fetched over MCP."""
    set_tracing_disabled(True)
    access = f"gitlab-{uuid.uuid4().hex[:6]}"
    headers = {"X-Holdline-User": f"agents-{uuid.uuid4().hex[:6]}", "X-Holdline-Tenant": "acme"}
    async with MCPServerStreamableHttp(
        params={"url": f"{url}/mcp", "headers": headers}, name="holdline"
    ) as holdline:
        print("tools:", [t.name for t in await holdline.list_tools()])
        agent = Agent(name="assistant", instructions="You grant accesses.",
                      mcp_servers=[holdline], model=ScriptedModel())
        result = await Runner.run(agent, f"give me access to {access}")
        print("run:", result.final_output)
        for _ in range(40):
            pending = await holdline.call_tool("holdline_pending", {})
            text = pending.content[0].text
            if access in text:
                print("pending:", text)
                return
            await asyncio.sleep(0.5)
        print("the closing did not arrive in 20 s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holdline", default="http://127.0.0.1:8080")
    asyncio.run(main(parser.parse_args().holdline))
