"""A LiveKit Agents session in text mode (no room, no server) whose tools run on holdline.

    .venv/bin/python examples/livekit_text.py --holdline http://127.0.0.1:8080

asks for an access, prints the acceptance the model gave at once, then waits for the late
result, which the bridge says when the session is idle. The model is scripted (LiveKit's
own `llm.LLM` base), so it runs offline: "access to A, B and C" becomes one
`provision_access` call, "availability at R on D" a `check_availability` call, a tool
result is said as it is, and instructions carrying holdline's facts are answered in its own
words ("Update: <summary> (<status>)").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import uuid
from typing import Any

from livekit.agents import Agent, AgentSession, llm
from livekit.agents.llm import ChatChunk, ChatContext, ChatMessage, ChoiceDelta, FunctionToolCall
from livekit.agents.types import (
    DEFAULT_API_CONNECT_OPTIONS,
    NOT_GIVEN,
    APIConnectOptions,
    NotGivenOr,
)
from livekit.agents.voice.run_result import RunResult

from holdline.client import HoldlineClient
from holdline.integrations.livekit import HoldlineLiveKit

_ACCESS = re.compile(r"access to (?P<names>[a-z0-9 ,_-]+?)(?: and check|$)", re.IGNORECASE)
_AVAILABILITY = re.compile(r"availability at (?P<restaurant>[a-z0-9_-]+) on (?P<date>[0-9-]+)")
_FACT = re.compile(r"^- (?P<tool>[a-z_]+) \((?P<status>[a-z_]+)\): (?P<summary>.+)$", re.MULTILINE)


def calls_for(text: str) -> list[FunctionToolCall]:
    """The tool calls a request asks for."""
    calls: list[FunctionToolCall] = []
    if found := _ACCESS.search(text):
        names = [p.strip() for p in re.split(r",|\band\b", found["names"]) if p.strip()]
        calls.append(_call("provision_access", {"accesses": names}))
    if found := _AVAILABILITY.search(text):
        calls.append(_call("check_availability",
                           {"restaurant": found["restaurant"], "date": found["date"]}))
    return calls


def _call(name: str, arguments: dict[str, Any]) -> FunctionToolCall:
    return FunctionToolCall(
        name=name, arguments=json.dumps(arguments), call_id=f"call_{uuid.uuid4().hex[:12]}"
    )


class ScriptedLLM(llm.LLM[None]):
    """A deterministic model. `reply_delay_s` holds each text reply back that long (a slow
    model keeps the session busy, which is what a test of "said when idle" needs)."""

    def __init__(self, *, reply_delay_s: float = 0.0) -> None:
        super().__init__()
        self.reply_delay_s = reply_delay_s

    def chat(
        self,
        *,
        chat_ctx: ChatContext,
        tools: list[llm.Tool] | None = None,
        conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS,
        parallel_tool_calls: NotGivenOr[bool] = NOT_GIVEN,
        tool_choice: NotGivenOr[llm.ToolChoice] = NOT_GIVEN,
        extra_kwargs: NotGivenOr[dict[str, Any]] = NOT_GIVEN,
    ) -> llm.LLMStream:
        """One scripted generation."""
        return _ScriptedStream(
            self, chat_ctx=chat_ctx, tools=tools or [], conn_options=conn_options
        )


class _ScriptedStream(llm.LLMStream):
    async def _run(self) -> None:
        assert isinstance(self._llm, ScriptedLLM)
        delta = _answer(self._chat_ctx)
        if delta.content and self._llm.reply_delay_s:
            await asyncio.sleep(self._llm.reply_delay_s)
        self._event_ch.send_nowait(ChatChunk(id=uuid.uuid4().hex, delta=delta))


def _answer(chat_ctx: ChatContext) -> ChoiceDelta:
    last = chat_ctx.items[-1] if chat_ctx.items else None
    if last is not None and last.type == "function_call_output":
        return ChoiceDelta(role="assistant", content=last.output)
    if isinstance(last, ChatMessage) and last.role == "user":
        text = last.text_content or ""
        if calls := calls_for(text):
            return ChoiceDelta(role="assistant", tool_calls=calls)
        return ChoiceDelta(role="assistant", content=f"You said: {text}")
    # generate_reply(instructions=...) over holdline's facts: phrase them in its own words
    for item in reversed(chat_ctx.items):
        if not isinstance(item, ChatMessage) or item.role not in ("system", "developer"):
            continue
        if facts := _FACT.findall(item.text_content or ""):
            return ChoiceDelta(role="assistant", content="Update: " + "; ".join(
                f"{summary} ({status})" for _, status, summary in facts))
    return ChoiceDelta(role="assistant", content="Okay.")


async def main(holdline_url: str, resource: str) -> None:
    """Ask, print the acceptance, then wait for the closing."""
    async with HoldlineClient(holdline_url) as hl:
        session = await hl.create_session(user_id=f"lk-{uuid.uuid4().hex[:6]}")
        bridge = HoldlineLiveKit(session)
        tools: list[llm.Tool | llm.Toolset] = [*await bridge.tools()]
        agent = Agent(instructions="You help with accesses.", tools=tools)
        async with AgentSession(llm=ScriptedLLM()) as agent_session:
            await agent_session.start(agent)
            await bridge.start(agent_session)
            result: RunResult[Any] = await agent_session.run(
                user_input=f"give me access to {resource}"
            )
            for event in result.events:
                if event.type == "message" and isinstance(event.item, ChatMessage):
                    print("agent:", event.item.text_content)
            closing = None
            for _ in range(300):
                snapshot = await session.snapshot()
                closing = next((d for d in snapshot["deliveries"] if d["status"] == "spoken"), None)
                if closing:
                    break
                await asyncio.sleep(0.1)
            said = [m.text_content for m in agent_session.history.items
                    if isinstance(m, ChatMessage) and m.role == "assistant"]
            print("agent (late):", said[-1] if closing else "(no closing within 30 s)")
            await bridge.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--holdline", default="http://127.0.0.1:8080")
    parser.add_argument("--resource", default="notion")
    args = parser.parse_args()
    asyncio.run(main(args.holdline, args.resource))
