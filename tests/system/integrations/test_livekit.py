"""LiveKit Agents on holdline: a real `AgentSession` in text mode (no room, no server), only
its model scripted, against holdline's real services."""

from __future__ import annotations

from typing import Any

from livekit.agents import Agent, AgentSession
from livekit.agents.llm import ChatMessage

from examples.livekit_text import ScriptedLLM
from holdline.client import HoldlineClient, SessionClient
from holdline.integrations.livekit import HoldlineLiveKit
from testkit.surface import SurfaceStack, effects, eventually, fault, unique


def said(agent_session: AgentSession[Any]) -> list[str]:
    """What the agent said, in order (its history keeps only what played)."""
    return [
        item.text_content or ""
        for item in agent_session.history.items
        if isinstance(item, ChatMessage) and item.role == "assistant"
    ]


async def final_of(session: SessionClient, batch_id: str, status: str) -> dict[str, Any] | None:
    """The batch's final delivery once it reached `status`."""
    for delivery in (await session.snapshot())["deliveries"]:
        if delivery["batch_id"] == batch_id and delivery.get("kind", "final") == "final":
            return delivery if delivery["status"] == status else None
    return None


async def test_the_tool_call_returns_the_interim_and_the_late_result_is_said_once_when_idle(
    stack: SurfaceStack, session: SessionClient
) -> None:
    name = unique("notion")
    await fault(stack, match=name, latency_ms=1500, times=1)
    bridge = HoldlineLiveKit(session)
    model = ScriptedLLM()
    agent = Agent(instructions="You grant accesses.", tools=await bridge.tools())
    async with AgentSession(llm=model) as agent_session:
        await agent_session.start(agent)
        await bridge.start(agent_session)
        try:
            result = await agent_session.run(user_input=f"give me access to {name}")
            outputs = [e.item.output for e in result.events if e.type == "function_call_output"]
            snapshot = await session.snapshot()
            # The tool's result is holdline's honest acceptance, returned while the work runs.
            assert len(outputs) == 1
            assert [o["status"] for o in snapshot["operations"]] != ["committed"]
            assert "granted" not in outputs[0].lower()
            assert said(agent_session) == [outputs[0]]
            batch = snapshot["operations"][0]["batch_id"]

            # The session is busy when the result lands: a slow reply is being generated.
            model.reply_delay_s = 2.5
            busy = agent_session.run(user_input="tell me about your day")
            spoken = await eventually(lambda: final_of(session, batch, "spoken"), timeout_s=30)
            await busy
            history = said(agent_session)
            closing = [text for text in history if name in text and text != outputs[0]]
            assert len(closing) == 1, history
            # Said after the busy reply finished, never over it.
            assert history.index(closing[0]) > history.index("You said: tell me about your day")
            assert closing[0] == (await _closing_text(session, spoken["delivery_id"]))
            assert await effects(stack, name) == 1
        finally:
            await bridge.aclose()


async def _closing_text(session: SessionClient, delivery_id: str) -> str:
    for message in (await session.snapshot())["messages"]:
        if message.get("delivery_id") == delivery_id:
            return str(message["text"])
    raise AssertionError(f"no message carries {delivery_id}")


async def test_a_handoff_keeps_session_owned_results_and_drops_agent_owned_ones(
    stack: SurfaceStack, hl: HoldlineClient
) -> None:
    session = await hl.create_session(user_id=unique("lkh"), tenant_id="acme", agent="concierge")
    access, restaurant = unique("hubspot"), unique("casa")
    await fault(stack, match=access, latency_ms=1500, times=1)
    bridge = HoldlineLiveKit(session)
    concierge = Agent(instructions="You are the concierge.", tools=await bridge.tools())
    billing = Agent(instructions="You are billing.")
    async with AgentSession(llm=ScriptedLLM()) as agent_session:
        await agent_session.start(concierge)
        await bridge.start(agent_session)
        try:
            # The user is still talking (an availability read is quick): neither closing
            # finds a moment before the handoff.
            await session.signal(user_speaking=True)
            await agent_session.run(
                user_input=f"give me access to {access} and check availability at "
                f"{restaurant} on 2026-12-24"
            )
            operations = {o["tool"]: o for o in (await session.snapshot())["operations"]}
            assert set(operations) == {"provision_access", "check_availability"}
            handed = await bridge.handoff(agent_session, billing, "billing")
            assert handed["agent"] == "billing"
            await session.signal(user_speaking=False)
            kept = operations["provision_access"]["batch_id"]
            dropped = operations["check_availability"]["batch_id"]

            spoken = await eventually(lambda: final_of(session, kept, "spoken"), timeout_s=30)
            suppressed = await eventually(
                lambda: final_of(session, dropped, "suppressed"), timeout_s=30
            )
            assert suppressed["reason"].startswith("agent_not_allowed")
            assert agent_session.current_agent is billing
            history = said(agent_session)
            # The session-owned closing was said once, by the new agent's session; the
            # agent-owned result (its closing would name the restaurant) never was.
            closing = await _closing_text(session, spoken["delivery_id"])
            assert history.count(closing) == 1, history
            # Besides that closing, only the acceptance was said (the model answered the
            # turn's two calls with one line).
            assert len(history) == 2, history
            assert history[0].startswith("Accepted:")
        finally:
            await bridge.aclose()


async def test_with_speak_model_the_frameworks_model_phrases_the_facts(
    stack: SurfaceStack, session: SessionClient
) -> None:
    name = unique("jira")
    await fault(stack, match=name, latency_ms=800, times=1)
    bridge = HoldlineLiveKit(session, speak="model")
    agent = Agent(instructions="You grant accesses.", tools=await bridge.tools())
    async with AgentSession(llm=ScriptedLLM()) as agent_session:
        await agent_session.start(agent)
        await bridge.start(agent_session)
        try:
            await agent_session.run(user_input=f"give me access to {name}")
            batch = (await session.snapshot())["operations"][0]["batch_id"]
            await eventually(lambda: final_of(session, batch, "spoken"), timeout_s=30)
        finally:
            await bridge.aclose()
        history = said(agent_session)
    # The closing came from LiveKit's model over holdline's facts, not holdline's template.
    phrased = [text for text in history if text.startswith("Update: ")]
    assert len(phrased) == 1, history
    assert name in phrased[0]
    assert "(committed)" in phrased[0]
    assert await effects(stack, name) == 1
