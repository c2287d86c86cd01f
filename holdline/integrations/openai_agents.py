"""holdline for the OpenAI Agents SDK: durable tools, and late results folded into the next run.

    bridge = HoldlineAgents(session)
    agent = Agent(name="assistant", instructions=..., tools=await bridge.tools())
    result = await bridge.run(agent, "give me access to notion")      # Runner.run underneath

- Tools: each holdline tool is a `FunctionTool` whose `on_invoke_tool` posts the call to
  `POST .../tool-calls` (the SDK's call id is the `tool_call_id`, its JSON string the
  arguments) and returns the honest `output` at once: the run never waits for the work.
- Clocks: `typing(True/False)` while the user composes a message (chat's "user is speaking").
- Deliveries: a text agent's safe point is between runs. `run()` reads `GET .../pending`
  first, puts holdline's context ahead of the new input as a system item, runs, and only
  when the run returned acknowledges each folded update `attached`. A run that raised
  acknowledges nothing, so the update is offered again.
"""

from __future__ import annotations

from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult, TResponseInputItem
from agents.tool_context import ToolContext

from holdline.client import PendingUpdates, SessionClient, ToolCall

from ._common import ToolSpec, agent_tools, call_tool, pending_context

__all__ = ["HoldlineAgents"]


class HoldlineAgents:
    """Bridges agents run with `Runner.run` to one holdline session."""

    def __init__(self, session: SessionClient) -> None:
        self.session = session
        self.last_attached: list[str] = []

    async def tools(self) -> list[FunctionTool]:
        """The active holdline agent's tools as `FunctionTool`s."""
        return [self._tool(spec) for spec in await agent_tools(self.session)]

    def _tool(self, spec: ToolSpec) -> FunctionTool:
        async def invoke(context: ToolContext[Any], arguments: str) -> str:
            call = ToolCall(
                tool_call_id=context.tool_call_id, name=spec.name, arguments=arguments or "{}"
            )
            return await call_tool(self.session, call)

        # holdline validates the arguments against its own schema (and says why it refuses);
        # the SDK's strict mode would rewrite that schema, so it stays as declared.
        return FunctionTool(
            name=spec.name,
            description=spec.description,
            params_json_schema=spec.parameters,
            on_invoke_tool=invoke,
            strict_json_schema=False,
        )

    async def typing(self, typing: bool) -> None:
        """The user is composing the next message (or stopped): holdline holds a closing
        back meanwhile and leaves it for the next run."""
        await self.session.signal(user_speaking=typing)

    async def with_pending(
        self, input: str | list[TResponseInputItem]
    ) -> tuple[list[TResponseInputItem], PendingUpdates]:
        """`input` with holdline's pending updates ahead of it (unchanged when there are none)."""
        items: list[TResponseInputItem] = (
            [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        )
        pending = await self.session.pending()
        if pending.deliveries:
            note: TResponseInputItem = {
                "role": "system",
                "content": pending_context(pending.deliveries, pending.context),
            }
            items = [note, *items]
        return items, pending

    async def run(
        self,
        agent: Agent[Any],
        input: str | list[TResponseInputItem],
        *,
        context: Any = None,
        **options: Any,
    ) -> RunResult:
        """`Runner.run` with pending updates folded in and acknowledged `attached` after it."""
        items, pending = await self.with_pending(input)
        result = await Runner.run(agent, items, context=context, **options)
        self.last_attached = []
        for delivery in pending.deliveries:
            await self.session.ack(delivery.delivery_id, "attached")
            self.last_attached.append(delivery.delivery_id)
        return result

