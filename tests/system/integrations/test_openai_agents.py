"""The OpenAI Agents SDK on holdline: `Runner.run` for real, only its `Model` scripted,
against holdline's real services."""

from __future__ import annotations

from typing import Any

import pytest
from agents import Agent, set_tracing_disabled

from examples.openai_agents_text import ScriptedModel
from holdline.client import PendingUpdates, SessionClient
from holdline.integrations.openai_agents import HoldlineAgents
from testkit.surface import SurfaceStack, effects, eventually, fault, unique


@pytest.fixture(autouse=True)
def _offline() -> None:
    set_tracing_disabled(True)


async def test_a_run_calls_a_holdline_tool_and_the_next_run_attaches_the_update(
    stack: SurfaceStack, session: SessionClient
) -> None:
    name = unique("gitlab")
    await fault(stack, match=name, latency_ms=1200, times=1)
    bridge = HoldlineAgents(session)
    model = ScriptedModel()
    agent = Agent(name="assistant", instructions="You grant accesses.",
                  tools=await bridge.tools(), model=model)

    first = await bridge.run(agent, f"give me access to {name}")
    snapshot = await session.snapshot()
    [operation] = snapshot["operations"]
    # The tool's output is holdline's acceptance: it says the work started, not that it is done.
    assert operation["status"] != "committed"
    assert first.final_output.startswith("Accepted: provision_access")
    assert operation["operation_id"] in first.final_output
    assert bridge.last_attached == []

    # The user is typing the next message when the access completes: the closing waits.
    await bridge.typing(True)

    async def waiting() -> PendingUpdates | None:
        pending = await session.pending()
        return pending if pending.deliveries else None

    pending = await eventually(waiting, timeout_s=30)
    [update] = pending.deliveries
    second = await bridge.run(agent, "thanks, anything else?")
    await bridge.typing(False)

    # The update went into the next run's input, ahead of the user's message...
    system = [i for i in model.inputs[-1] if i.get("role") == "system"]
    assert len(system) == 1
    assert update.text in str(system[0]["content"])
    assert model.inputs[-1][-1] == {"role": "user", "content": "thanks, anything else?"}
    assert update.text in second.final_output
    # ...and was acknowledged `attached`: delivered once, never pushed or pending again.
    assert bridge.last_attached == [update.delivery_id]

    async def delivered() -> dict[str, Any] | None:
        for delivery in (await session.snapshot())["deliveries"]:
            if delivery["delivery_id"] == update.delivery_id and delivery["status"] == "delivered":
                return delivery
        return None

    await eventually(delivered, timeout_s=15)
    assert (await session.pending()).deliveries == []
    third = await bridge.run(agent, "bye")
    assert bridge.last_attached == []
    assert update.text not in third.final_output
    assert await effects(stack, name) == 1
