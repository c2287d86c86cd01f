"""An OpenAI Agents SDK agent whose tools run on holdline, offline (a scripted `Model`).

    .venv/bin/python examples/openai_agents_text.py --holdline http://127.0.0.1:8080

The first run asks for an access: the scripted model calls `provision_access`, and the
tool's output (holdline's honest acceptance) is what it answers. While the user "types" the
next message, the access completes; the second run starts with that update folded into its
input, and the bridge acknowledges it `attached`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents import (
    Agent,
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    TResponseInputItem,
    Usage,
    set_tracing_disabled,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseStreamEvent,
)

from holdline.client import HoldlineClient
from holdline.integrations.openai_agents import HoldlineAgents

_ACCESS = re.compile(r"access to (?P<names>[a-z0-9 ,_-]+)", re.IGNORECASE)


class ScriptedModel(Model):
    """"access to A and B" → one `provision_access` call; a tool output → said as it is;
    otherwise it repeats the system context it was given (so a test sees what was folded
    in) or says "Okay." Every input it saw is kept in `inputs`."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        """One scripted turn."""
        items: list[dict[str, Any]] = (
            [{"role": "user", "content": input}] if isinstance(input, str)
            else [dict(item) for item in input]
        )
        self.inputs.append(items)
        last = items[-1]
        if last.get("type") == "function_call_output":
            return _reply(str(last["output"]))
        found = _ACCESS.search(str(last.get("content", "")))
        if last.get("role") == "user" and found:
            names = [p.strip() for p in re.split(r",|\band\b", found["names"]) if p.strip()]
            call = ResponseFunctionToolCall(
                type="function_call", call_id=f"call_{uuid.uuid4().hex[:12]}",
                name="provision_access", arguments=json.dumps({"accesses": names}),
                id=f"fc_{uuid.uuid4().hex[:12]}", status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        system = [str(i["content"]) for i in items if i.get("role") == "system"]
        return _reply(" ".join(system) or "Okay.")

    def stream_response(  # noqa: PLR0917 - the SDK's Model signature
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> AsyncIterator[ResponseStreamEvent]:
        """Not scripted: these examples use `Runner.run`."""
        raise NotImplementedError("ScriptedModel answers Runner.run only")


def _reply(text: str) -> ModelResponse:
    message = ResponseOutputMessage(
        id=f"msg_{uuid.uuid4().hex[:12]}", role="assistant", status="completed", type="message",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )
    return ModelResponse(output=[message], usage=Usage(), response_id=None)


async def main(holdline_url: str, resource: str) -> None:
    """Two runs: the request, then the next message with the update folded in."""
    set_tracing_disabled(True)  # offline: nothing is exported
    async with HoldlineClient(holdline_url) as hl:
        session = await hl.create_session(user_id=f"oa-{uuid.uuid4().hex[:6]}")
        bridge = HoldlineAgents(session)
        tools: list[Tool] = [*await bridge.tools()]
        agent = Agent(name="assistant", instructions="You grant accesses.",
                      tools=tools, model=ScriptedModel())
        first = await bridge.run(agent, f"give me access to {resource}")
        print("agent:", first.final_output)
        await bridge.typing(True)
        for _ in range(300):
            if (await session.pending()).deliveries:
                break
            await asyncio.sleep(0.1)
        second = await bridge.run(agent, "thanks, anything else?")
        await bridge.typing(False)
        print("agent (next run):", second.final_output, "| attached:", bridge.last_attached)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--holdline", default="http://127.0.0.1:8080")
    parser.add_argument("--resource", default="notion")
    args = parser.parse_args()
    asyncio.run(main(args.holdline, args.resource))
