"""The Agent API end to end: real broker, real services, the typed client over HTTP and
WebSocket, test agents that use holdline.client alone and never holdline's model."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from holdline.client import DeliverySay, HoldlineClient, HoldlineError, ToolCall
from testkit.surface import SurfaceStack, effects, eventually, fault, unique

from .sessions import DAY, AgentProcess, delivery, events, session
from .sessions import final_settled as settled

ACCEPTED = "has started and is not finished"


def said(snap: dict[str, object], delivery_id: str) -> list[dict[str, object]]:
    """History messages that carry the closing."""
    messages = snap["messages"]
    assert isinstance(messages, list)
    return [m for m in messages if m["delivery_id"] == delivery_id]


async def test_two_calls_are_one_batch_with_one_closing_after_both_commit(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    fast, slow = unique("github"), unique("nobu")
    await fault(stack, match=slow, latency_ms=900, times=1)
    async with s.agent_stream() as stream:
        answer = await s.tool_calls(
            [
                ToolCall(tool_call_id="call_a", name="provision_access",
                         arguments={"accesses": [fast]}),
                # What models emit: the arguments as a JSON string.
                ToolCall(tool_call_id="call_b", name="book_table", arguments=json.dumps(
                    {"restaurant": slow, "date": DAY, "time": "21:00"})),
            ],
            user_text="give me github and book nobu",
        )
        assert [r.tool_call_id for r in answer.results] == ["call_a", "call_b"]
        for result in answer.results:
            assert ACCEPTED in result.output, result.output
            [op] = result.operations
            assert op.status in {"admitted", "running"}
            assert op.batch_id == answer.batch_id
        say = await stream.next(30)
        assert say.batch_id == answer.batch_id
        assert {f.status for f in say.facts} == {"committed"}
        assert fast in say.text
        assert slow in say.text
        await stream.ack(say.delivery_id, "started")
        acked = await stream.ack(say.delivery_id, "spoken")
        assert acked.delivery_status == "spoken"
    snap = await s.snapshot()
    assert delivery(snap, answer.batch_id)["status"] == "spoken"
    assert [m["text"] for m in said(snap, say.delivery_id)] == [say.text]
    timeline = (await s.timeline())["events"]
    kinds = [(e["type"], e.get("operation_id"), e.get("delivery_id")) for e in timeline]
    commits = [i for i, k in enumerate(kinds) if k[0] == "operation.committed"]
    sent = [i for i, k in enumerate(kinds) if k[0] == "delivery.sent"]
    assert len(commits) == 2
    assert len(sent) == 1
    assert max(commits) < sent[0], "said only after both members committed"
    assert sum(1 for k in kinds if k[0] == "tool_calls.received") == 1


async def test_nothing_is_said_while_the_user_speaks(hl: HoldlineClient) -> None:
    s = await session(hl)
    async with s.agent_stream() as stream:
        await stream.signal(user_speaking=True)
        await eventually(lambda: events(s, "speech.started"))
        answer = await s.tool_calls(
            [ToolCall(tool_call_id="c1", name="provision_access",
                      arguments={"accesses": [unique("jira")]})]
        )
        snap = await settled(s, answer.batch_id, "waiting")
        assert delivery(snap, answer.batch_id)["reason"] == "user_speaking"
        assert {o["status"] for o in snap["operations"]} == {"committed"}
        assert stream.buffered == 0
        await stream.signal(user_speaking=False)
        say = await stream.next(20)
        assert not say.interrupt
        await stream.ack(say.delivery_id, "spoken")
    timeline = [e["type"] for e in (await s.timeline())["events"]]
    assert timeline.index("speech.stopped") < timeline.index("delivery.sent")


async def test_unheard_with_heard_text_is_said_again_shorter(hl: HoldlineClient) -> None:
    s = await session(hl)
    names = [unique("figma"), unique("slack")]
    async with s.agent_stream() as stream:
        answer = await s.tool_calls(
            [ToolCall(tool_call_id="c1", name="provision_access", arguments={"accesses": names})]
        )
        first = await stream.next(30)
        await stream.ack(first.delivery_id, "started")
        cut = await stream.ack(first.delivery_id, "unheard", heard_text="All done:")
        assert cut.delivery_status in {"unheard", "pending", "waiting"}
        again = await stream.next(20)
        assert again.delivery_id == first.delivery_id
        assert again.seq > first.seq
        assert len(again.text) < len(first.text)
        await stream.ack(again.delivery_id, "started")
        await stream.ack(again.delivery_id, "spoken")
    snap = await s.snapshot()
    texts = [m["text"] for m in snap["messages"]]
    # Only what was heard: the cut words, then the short closing that played whole.
    assert texts == ["All done:", again.text]
    assert [m["text"] for m in said(snap, first.delivery_id)] == [again.text]
    assert delivery(snap, answer.batch_id)["status"] == "spoken"


async def test_a_repeated_tool_call_id_returns_the_same_answer(hl: HoldlineClient) -> None:
    s = await session(hl)
    call = ToolCall(tool_call_id="call_same", name="provision_access",
                    arguments={"accesses": [unique("vault")]})
    first = await s.tool_calls([call], turn_id="model-turn-7", response_id="resp-7")
    assert first.turn_id == "model-turn-7"
    again = await s.tool_calls([call], turn_id="model-turn-8")
    assert again == first
    other = ToolCall(tool_call_id="call_new", name="provision_access",
                     arguments={"accesses": [unique("okta")]})
    mixed = await s.tool_calls([call, other])
    assert mixed.results[0] == first.results[0]
    assert mixed.batch_id != first.batch_id
    snap = await s.snapshot()
    assert len(snap["operations"]) == 2
    assert len(await events(s, "tool_calls.received")) == 2


async def test_two_call_ids_for_one_intent_make_one_effect(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    name = unique("notion")
    first = await s.tool_calls(
        [ToolCall(tool_call_id="c1", name="provision_access", arguments={"accesses": [name]})]
    )
    second = await s.tool_calls(
        [ToolCall(tool_call_id="c2", name="provision_access",
                  arguments=json.dumps({"accesses": [name]}))]
    )
    [op] = first.results[0].operations
    [joined] = second.results[0].operations
    assert joined.operation_id == op.operation_id
    assert second.results[0].output.startswith("Already requested earlier")

    async def committed() -> bool:
        snap = await s.snapshot()
        return [o["status"] for o in snap["operations"]] == ["committed"]

    await eventually(committed)
    assert await effects(stack, name) == 1


async def test_a_killed_agent_leaves_its_delivery_to_the_next_connection(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    holder = await AgentProcess.start(stack.url, s, "hold")
    answer = await s.tool_calls(
        [ToolCall(tool_call_id="c1", name="provision_access",
                  arguments={"accesses": [unique("miro")]})]
    )
    pushed = await holder.next("say")
    await holder.kill9()
    # The vanished agent never confirmed it: back to pending, nothing in history.
    snap = await settled(s, answer.batch_id, "waiting", "pending")
    assert said(snap, pushed["delivery_id"]) == []
    speaker = await AgentProcess.start(stack.url, s, "speak")
    try:
        again = await speaker.next("say")
        await speaker.next("spoken")
    finally:
        await speaker.kill9()
    assert again["delivery_id"] == pushed["delivery_id"]
    assert again["text"] == pushed["text"], "never started: said again whole"
    assert [line["event"] for line in speaker.lines].count("say") == 1
    snap = await s.snapshot()
    assert delivery(snap, answer.batch_id)["status"] == "spoken"
    assert len(said(snap, pushed["delivery_id"])) == 1
    [unheard] = await events(s, "delivery.unheard")
    assert unheard["data"]["reason"].startswith("not_started")
    assert len(await events(s, "delivery.spoken")) == 1


async def test_the_client_survives_a_killed_surface(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    early, pushed_name, late = unique("asana"), unique("linear"), unique("zoom")
    await fault(stack, match=late, latency_ms=2500, times=1)
    got: list[DeliverySay] = []
    async with s.agent_stream() as stream:
        spoken = await s.tool_calls(
            [ToolCall(tool_call_id="c1", name="provision_access", arguments={"accesses": [early]})]
        )
        got.append(await stream.next(30))
        await stream.ack(got[-1].delivery_id, "spoken")
        unacked = await s.tool_calls(
            [ToolCall(tool_call_id="c2", name="provision_access",
                      arguments={"accesses": [pushed_name]})]
        )
        got.append(await stream.next(30))
        running = await s.tool_calls(
            [ToolCall(tool_call_id="c3", name="provision_access", arguments={"accesses": [late]})]
        )
        surface = stack.procs["interaction_surface"]
        surface.kill9()
        surface.start()
        # Said while the surface was down: the ack waits for the reconnect and is resent.
        await stream.ack(got[-1].delivery_id, "spoken")
        try:
            got.append(await stream.next(40))
        except TimeoutError:
            trail = [(e["type"], e.get("delivery_id"), e["data"]) for e in
                     (await s.timeline())["events"] if e["stream"] in ("interaction", "deliveries")]
            raise AssertionError(f"no closing after the restart: {trail}") from None
        await stream.ack(got[-1].delivery_id, "spoken")
        assert stream.connections >= 2
    assert [g.batch_id for g in got] == [spoken.batch_id, unacked.batch_id, running.batch_id]
    snap = await s.snapshot()
    for batch_id in (spoken.batch_id, unacked.batch_id, running.batch_id):
        final = delivery(snap, batch_id)
        assert final["status"] == "spoken"
        assert len(said(snap, final["delivery_id"])) == 1
    assert len(await events(s, "delivery.spoken")) == 3


async def test_an_urgent_failure_interrupts_the_user(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    account = unique("eve")
    await fault(stack, match=f"{account}*", status=403, times=1)
    async with s.agent_stream() as stream:
        asked = await s.tool_calls(
            [ToolCall(tool_call_id="t1", name="transfer_money",
                      arguments={"to_account": account, "amount_cents": 7000})]
        )
        [pending] = asked.results[0].operations
        assert pending.status == "awaiting_confirmation"
        assert "confirm_operation" in asked.results[0].output
        await stream.signal(user_speaking=True)
        await eventually(lambda: events(s, "speech.started"))
        # The user said yes: the agent's model calls the declared confirm tool.
        yes = await s.tool_calls(
            [ToolCall(tool_call_id="t2", name="confirm_operation",
                      arguments={"operation_id": pending.operation_id, "confirmed": True})]
        )
        assert yes.results[0].output.startswith("Confirmed:")
        say = await stream.next(30)
        assert (say.interrupt, say.priority) == (True, "urgent")
        assert [f.status for f in say.facts] == ["failed_final"]
        await stream.ack(say.delivery_id, "spoken")
    snap = await s.snapshot()
    assert delivery(snap, asked.batch_id)["mode"] == "interrupt"
    timeline = [e["type"] for e in (await s.timeline())["events"]]
    assert "speech.stopped" not in timeline, "said while the user was still speaking"


async def test_handoff_changes_the_tools_and_the_owner_rules_apply(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    names = {t["function"]["name"] for t in await s.tools("openai")}
    assert "billing_access" not in names
    assert {"provision_access", "confirm_operation"} <= names
    with pytest.raises(HoldlineError) as refused:
        await s.tool_calls(
            [ToolCall(tool_call_id="b0", name="billing_access", arguments={"access": "ledger"})]
        )
    assert refused.value.status == 422
    access, restaurant = unique("gitlab"), unique("sushi")
    await fault(stack, match=access, latency_ms=1200, times=1)
    # The read answers after the handoff below (within the read's 0.4 s attempt timeout
    # under the stack's timeout scale), so its result arrives owned by the agent handed off.
    await fault(stack, match=restaurant, latency_ms=200, times=1, reads=True)
    async with s.agent_stream() as stream:
        kept = await s.tool_calls(
            [ToolCall(tool_call_id="k1", name="provision_access", arguments={"accesses": [access]})]
        )
        owned = await s.tool_calls(
            [ToolCall(tool_call_id="k2", name="check_availability",
                      arguments={"restaurant": restaurant, "date": DAY})]
        )
        await s.handoff("billing")
        anthropic = await s.tools("anthropic")
        assert "billing_access" in {t["name"] for t in anthropic}
        assert all("input_schema" in t for t in anthropic)
        billing = await s.tool_calls(
            [ToolCall(tool_call_id="k3", name="billing_access",
                      arguments={"access": unique("ledger")})]
        )
        assert ACCEPTED in billing.results[0].output
        heard = []
        for _ in range(2):
            say = await stream.next(30)
            heard.append(say.batch_id)
            await stream.ack(say.delivery_id, "spoken")
    assert sorted(heard) == sorted([kept.batch_id, billing.batch_id])
    snap = await settled(s, owned.batch_id, "suppressed")
    assert delivery(snap, owned.batch_id)["reason"].startswith("agent_not_allowed")


async def test_a_closing_decided_before_a_handoff_is_given_back_not_pushed(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    # The policy decides an agent-owned read's closing on a view without the handoff and is
    # held there while the handoff is recorded. When its decision lands, the surface does
    # not push it to the new agent: it gives the closing back unsaid, and the policy, its
    # channel caught up, suppresses it.
    hold_s = 1.5
    policy = stack.procs["delivery_policy"]
    async with policy.restarted_with(
        HOLDLINE_PAUSE_POINTS=f"policy.before_decision_recorded={hold_s}"
    ):
        s = await session(hl)
        async with s.agent_stream() as stream:
            owned = await s.tool_calls(
                [ToolCall(tool_call_id="h1", name="check_availability",
                          arguments={"restaurant": unique("ramen"), "date": DAY})]
            )
            await settled(s, owned.batch_id, "pending")
            # The policy took the closing and is held on its decision.
            await asyncio.sleep(hold_s / 3)
            await s.handoff("billing")
            snap = await settled(s, owned.batch_id, "suppressed")
            with pytest.raises(TimeoutError):
                await stream.next(0.5)
    closing = delivery(snap, owned.batch_id)
    assert closing["reason"].startswith("agent_not_allowed")
    kinds = [
        (e["type"], e["data"].get("reason", ""))
        for e in (await s.timeline())["events"]
        if e.get("delivery_id") == closing["delivery_id"]
    ]
    # Decided before the handoff (say it now), given back unsaid, requeued whole, then
    # decided again on the caught-up channel: suppressed.
    assert [k for k, _ in kinds] == [
        "delivery.ready", "delivery.decided", "delivery.sent", "delivery.unheard",
        "delivery.requeued", "delivery.decided", "delivery.suppressed",
    ]
    assert kinds[1][1] == "channel_idle"
    assert kinds[3][1].startswith("not_started: agent_not_allowed")
    assert kinds[5][1].startswith("agent_not_allowed")
    assert said(snap, closing["delivery_id"]) == []


async def test_next_turn_resync_over_http(hl: HoldlineClient) -> None:
    s = await session(hl)
    answer = await s.tool_calls(
        [ToolCall(tool_call_id="p1", name="provision_access",
                  arguments={"accesses": [unique("box")]})]
    )

    async def found() -> object:
        pending = await s.pending()
        return pending if pending.deliveries else None

    pending = await eventually(found, timeout_s=30.0)
    [update] = pending.deliveries
    assert update.text in pending.context
    assert [f.status for f in update.facts] == ["committed"]
    attached = await s.ack(update.delivery_id, "attached", turn_id="next-turn-1")
    assert attached.delivery_status == "delivered"
    again = await s.ack(update.delivery_id, "attached", turn_id="next-turn-1")
    assert again == attached
    with pytest.raises(HoldlineError) as late:
        await s.ack(update.delivery_id, "unheard")
    assert late.value.status == 409
    assert (await s.pending()).deliveries == []
    snap = await s.snapshot()
    assert delivery(snap, answer.batch_id)["mode"] == "next_turn"
    assert len(said(snap, update.delivery_id)) == 1


async def test_a_dropped_connection_returns_its_delivery_and_resume_skips_the_acked(
    hl: HoldlineClient,
) -> None:
    s = await session(hl)
    async with s.agent_stream() as stream:
        done = await s.tool_calls(
            [ToolCall(tool_call_id="r1", name="provision_access",
                      arguments={"accesses": [unique("jira")]})]
        )
        first = await stream.next(30)
        await stream.ack(first.delivery_id, "spoken")
        left = await s.tool_calls(
            [ToolCall(tool_call_id="r2", name="provision_access",
                      arguments={"accesses": [unique("wiki")]})]
        )
        dropped = await stream.next(30)
        last_seq = stream.last_seq
    snap = await settled(s, left.batch_id, "waiting", "pending")
    assert said(snap, dropped.delivery_id) == []
    async with s.agent_stream(after=last_seq) as resumed:
        again = await resumed.next(20)
        assert again.delivery_id == dropped.delivery_id
        assert again.seq > last_seq
        await resumed.ack(again.delivery_id, "spoken")
        assert resumed.buffered == 0
    snap = await s.snapshot()
    assert delivery(snap, done.batch_id)["status"] == "spoken"
    assert len(await events(s, "delivery.sent", delivery_id=first.delivery_id)) == 1


async def test_the_published_documents_list_the_agent_api(stack: SurfaceStack) -> None:
    async with httpx.AsyncClient(base_url=stack.url) as http:
        doc = (await http.get("/openapi.json")).json()
    paths = doc["paths"]
    for path, method in (
        ("/v1/sessions/{session_id}/tools", "get"),
        ("/v1/sessions/{session_id}/tool-calls", "post"),
        ("/v1/sessions/{session_id}/signals", "post"),
        ("/v1/sessions/{session_id}/pending", "get"),
        ("/v1/sessions/{session_id}/deliveries/{delivery_id}/ack", "post"),
    ):
        assert method in paths[path], path
    assert "ToolCallsBody" in doc["components"]["schemas"]


async def test_closings_reach_the_agent_whichever_surface_handles_them(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    s = await session(hl)
    async with HoldlineClient(stack.second_url, timeout_s=20.0) as other:
        # The agent's channel is on the first surface; its model's calls go to the second.
        via_second = other.session(s.session_id, s.token)
        async with s.agent_stream() as stream:
            answers = [
                await via_second.tool_calls(
                    [ToolCall(tool_call_id=f"m{i}", name="provision_access",
                              arguments={"accesses": [unique("drive")]})]
                )
                for i in range(4)
            ]
            heard = []
            for _ in answers:
                say = await stream.next(30)
                heard.append(say.batch_id)
                await via_second.ack(say.delivery_id, "spoken")
    assert sorted(heard) == sorted(a.batch_id for a in answers)
    snap = await s.snapshot()
    for answer in answers:
        final = delivery(snap, answer.batch_id)
        assert final["status"] == "spoken"
        assert len(said(snap, final["delivery_id"])) == 1


async def test_tool_calls_enforce_tenants_by_role_and_record_the_refusal(
    hl: HoldlineClient, stack: SurfaceStack
) -> None:
    # A session of tenant acme names its own resource qualified and another tenant's.
    s = await session(hl)
    own, foreign = unique("crm"), unique("crm")
    answer = await s.tool_calls(
        [ToolCall(tool_call_id="t1", name="provision_access",
                  arguments={"accesses": [f"acme/{own}", f"globex/{foreign}"]})]
    )
    [result] = answer.results
    admitted, refused = result.operations
    assert refused.status == "rejected"
    assert admitted.status != "rejected"
    assert "another tenant" in result.output

    async def settled_ops() -> dict[str, Any] | None:
        snap = await s.snapshot()
        by_id = {o["operation_id"]: o["status"] for o in snap["operations"]}
        return by_id if by_id.get(admitted.operation_id) == "committed" else None

    statuses = await eventually(settled_ops, timeout_s=30.0)
    assert statuses[refused.operation_id] == "rejected"
    rejected = await events(s, "operation.rejected", operation_id=refused.operation_id)
    assert [e["data"]["reason"] for e in rejected] == ["forbidden"]
    # One effect for the caller's own resource, none for the other tenant's.
    assert await effects(stack, own) == 1
    assert await effects(stack, foreign) == 0
