"""holdline for LiveKit Agents: durable tools, the session's clocks and playback truth.

    bridge = HoldlineLiveKit(session)
    agent = Agent(instructions=..., tools=await bridge.tools())
    await agent_session.start(agent)
    await bridge.start(agent_session)

- Tools: each holdline tool is a raw-schema `function_tool`; a call goes to
  `POST .../tool-calls` and the honest `output` is the tool's return value at once, so the
  model answers with the acceptance and the turn is free (nothing waits in process memory).
- Clocks: `user_state_changed` (speaking or not) and `agent_state_changed` (speaking or
  not) become signals.
- Deliveries: a `delivery.say` waits for `AgentSession.wait_for_idle()`, then is spoken with
  `say(text)` (or `generate_reply(instructions=...)` over the facts with `speak="model"`).
  `spoken` when its `SpeechHandle` played out uninterrupted; `unheard` with the words the
  session kept in its history (LiveKit truncates an interrupted message to what played).
- Handoff: `await bridge.handoff(agent_session, new_agent, "billing")` tells holdline first
  (it keeps session-owned results and drops agent-owned ones as declared), gives the new
  agent that agent's holdline tools, then switches LiveKit's agent.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from livekit.agents import Agent, AgentSession, RunContext, function_tool
from livekit.agents.llm import ChatMessage, RawFunctionTool
from livekit.agents.voice.events import AgentStateChangedEvent, UserStateChangedEvent

from holdline.client import (
    AckStatus,
    AgentStream,
    DeliverySay,
    SessionClient,
    ToolCall,
)

from ._common import (
    Outbox,
    SignalPump,
    SpeakMode,
    ToolSpec,
    agent_tools,
    call_tool,
    facts_prompt,
    log,
)

__all__ = ["HoldlineLiveKit"]


class HoldlineLiveKit:
    """Bridges one LiveKit `AgentSession` to one holdline session (see the module docstring)."""

    def __init__(
        self, session: SessionClient, *, speak: SpeakMode = "text", after: int | None = None
    ) -> None:
        self.session = session
        self._speak = speak
        self._after = after
        self._signals = SignalPump(session)
        self._acks = Outbox("holdline-acks")
        self._task: asyncio.Task[None] | None = None
        self._stream: AgentStream | None = None
        self._agent_session: AgentSession[Any] | None = None
        # Set while LiveKit does not hear the user talking.
        self._user_quiet = asyncio.Event()
        self._user_quiet.set()

    async def tools(self) -> list[RawFunctionTool[Any, Any]]:
        """The active holdline agent's tools as LiveKit function tools."""
        return [self._tool(spec) for spec in await agent_tools(self.session)]

    def _tool(self, spec: ToolSpec) -> RawFunctionTool[Any, Any]:
        async def call(raw_arguments: dict[str, object], context: RunContext[Any]) -> str:
            return await self._call(spec.name, raw_arguments, context)

        schema = {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
        return function_tool(call, raw_schema=schema)

    async def _call(
        self, name: str, arguments: dict[str, object], context: RunContext[Any]
    ) -> str:
        call = ToolCall(
            tool_call_id=context.function_call.call_id, name=name, arguments=dict(arguments)
        )
        return await call_tool(self.session, call, _last_user_text(context))

    async def start(self, agent_session: AgentSession[Any]) -> None:
        """Listen to the session's clocks and say holdline's deliveries when it is idle."""
        self._agent_session = agent_session
        self._signals.start()
        self._acks.start()
        agent_session.on("user_state_changed", self._on_user_state)
        agent_session.on("agent_state_changed", self._on_agent_state)
        stream = self.session.agent_stream(after=self._after)
        await stream.__aenter__()
        self._stream = stream
        self._task = asyncio.get_running_loop().create_task(self._deliver(stream))

    async def aclose(self) -> None:
        """Stop saying deliveries; reports still queued get a bounded chance to go out."""
        if self._agent_session is not None:
            with contextlib.suppress(Exception):
                self._agent_session.off("user_state_changed", self._on_user_state)
                self._agent_session.off("agent_state_changed", self._on_agent_state)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._acks.drain(2.0)
        await self._acks.stop()
        await self._signals.stop()
        if self._stream is not None:
            await self._stream.__aexit__(None, None, None)
            self._stream = None

    async def handoff(
        self, agent_session: AgentSession[Any], agent: Agent, holdline_agent: str
    ) -> dict[str, Any]:
        """Hand the conversation to `agent`, which is `holdline_agent` to holdline."""
        answer = await self.session.handoff(holdline_agent)
        await agent.update_tools([*agent.tools, *await self.tools()])
        agent_session.update_agent(agent)
        return answer

    def _on_user_state(self, event: UserStateChangedEvent) -> None:
        speaking = event.new_state == "speaking"
        if speaking:
            self._user_quiet.clear()
        else:
            self._user_quiet.set()
        self._signals.send(user_speaking=speaking)

    def _on_agent_state(self, event: AgentStateChangedEvent) -> None:
        self._signals.send(agent_speaking=event.new_state == "speaking")

    async def _deliver(self, stream: AgentStream) -> None:
        async for say in stream:
            try:
                await self._say(say)
            except Exception:  # noqa: BLE001 - unacknowledged: holdline puts it back and decides again
                log.warning("delivery %s not said", say.delivery_id, exc_info=True)

    async def _say(self, say: DeliverySay) -> None:
        agent_session = self._agent_session
        assert agent_session is not None
        # holdline chose the moment from signals that may be slightly old; LiveKit's own
        # view is fresher: not over the user (unless urgent), and when its queue is free.
        if not say.interrupt:
            await self._user_quiet.wait()
        await agent_session.wait_for_idle()
        if say.interrupt:
            await agent_session.interrupt()
        if self._speak == "model" and say.facts:
            handle = agent_session.generate_reply(instructions=facts_prompt(say.text, say.facts))
        else:
            handle = agent_session.say(say.text)
        self._ack(say, "started")
        await handle.wait_for_playout()
        if handle.interrupted:
            heard = " ".join(
                item.text_content or ""
                for item in handle.chat_items
                if isinstance(item, ChatMessage) and item.role == "assistant"
            )
            self._ack(say, "unheard", heard_text=heard)
        else:
            self._ack(say, "spoken")

    def _ack(self, say: DeliverySay, status: AckStatus, heard_text: str | None = None) -> None:
        stream = self._stream
        delivery_id = say.delivery_id
        send: Callable[[], Awaitable[Any]]
        if stream is not None:
            send = lambda: stream.ack(delivery_id, status, heard_text=heard_text)  # noqa: E731
        else:
            send = lambda: self.session.ack(delivery_id, status, heard_text=heard_text)  # noqa: E731
        self._acks.put(send)


def _last_user_text(context: RunContext[Any]) -> str | None:
    for item in reversed(context.session.history.items):
        if isinstance(item, ChatMessage) and item.role == "user":
            return item.text_content
    return None
