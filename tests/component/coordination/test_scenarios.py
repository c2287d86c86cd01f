"""Seed 002's coordination scenarios against the real broker and both real services.

Each test plays admission, the worker and the interaction surface, and asserts durable
state (events replayed from the streams), exactly one final delivery per batch, causal
order and the reasons of every decision.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from libs.domain.batch import final_delivery_id
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    AgentHandedOff,
    BatchDrained,
    BatchOpened,
    ChannelConnected,
    ChannelDisconnected,
    DeliveryAttached,
    DeliveryDecided,
    DeliveryReady,
    DeliveryReconciliationRequested,
    DeliveryRequeued,
    DeliverySent,
    DeliverySpoken,
    DeliveryUnheard,
    OperationCommitted,
    OperationProgress,
    PlaybackFinished,
    PlaybackStarted,
    SpeechStarted,
    SpeechStopped,
    TurnReceived,
    UserActivity,
)
from testkit.drained import drained
from testkit.surface import eventually
from tests.component.coordination.harness import Scripted, Services, assert_one_final, new_id


async def _voice_session(scripted: Scripted) -> str:
    session = new_id("s")
    await scripted.open_session(session)
    await scripted.interaction(session, ChannelConnected(channel="voice", connection_id="call1"))
    return session


async def _decisions_until(
    scripted: Scripted,
    session: str,
    delivery: str,
    decision: str,
    timeout_s: float = 10.0,
    *,
    count: int = 1,
) -> list[tuple[str, str]]:
    async def probe() -> list[tuple[str, str]] | None:
        got = await scripted.decisions(session, delivery)
        return got if sum(1 for d, _ in got if d == decision) >= count else None

    return await eventually(probe, timeout_s=timeout_s)


async def test_tool_finishes_while_the_user_is_speaking(
    scripted: Scripted, services: Services
) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.commit(session, batch, "op1")
    delivery = final_delivery_id(batch)
    await _decisions_until(scripted, session, delivery, "wait_for_quiet")
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.WAITING
    stopped = await scripted.interaction(session, SpeechStopped(stream_ms=900))
    decisions = await _decisions_until(scripted, session, delivery, "deliver_now")
    assert [d for d, _ in decisions] == ["wait_for_quiet", "wait_for_quiet", "deliver_now"]
    assert decisions[0][1] == "user_speaking"
    assert decisions[1][1].startswith("quiet_window")
    assert decisions[2][1] == "channel_idle"
    # The quiet window (300 ms in these tests) passed before anything was said.
    decided = [e for e in await scripted.delivery_events(session)
               if e.delivery_id == delivery and type(e.event).__name__ == "DeliveryDecided"]
    assert decided[-1].occurred_at - stopped.occurred_at >= timedelta(milliseconds=300)
    await scripted.say(session, delivery)
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.SPOKEN
    assert state.mode == "proactive"
    await assert_one_final(scripted, session, batch)


async def test_tool_finishes_during_playback(scripted: Scripted, services: Services) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.interaction(session, PlaybackStarted(text="Let me check.", duration_ms=2000))
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.commit(session, batch, "op1")
    delivery = final_delivery_id(batch)
    decisions = await _decisions_until(scripted, session, delivery, "after_playback")
    assert decisions == [("after_playback", "playback_active")]
    await scripted.interaction(session, PlaybackFinished(heard=True, played_ms=2000))
    decisions = await _decisions_until(scripted, session, delivery, "deliver_now")
    assert decisions[-1] == ("deliver_now", "channel_idle")
    await assert_one_final(scripted, session, batch)


async def test_two_members_finish_in_reverse_order(scripted: Scripted, services: Services) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(
        session, batch, {"alpha": {}, "beta": {}, "gamma": {"arguments": {"access": "gamma"}}}
    )
    await scripted.commit(session, batch, "gamma")
    await scripted.commit(session, batch, "beta")
    # Nothing closes while a member is still running (once the coordinator has handled
    # both commits: every durable consumer has acknowledged everything).
    await drained(scripted.js, scripted.topology)
    assert await scripted.finals(session) == []
    assert [type(e.event) for e in await scripted.batch_events(session)] == [BatchOpened]
    last = await scripted.commit(session, batch, "alpha")
    await eventually(lambda: scripted.finals(session))
    ready = await assert_one_final(scripted, session, batch)
    assert ready.causation_id == last.event_id
    assert isinstance(ready.event, DeliveryReady)
    assert ready.event.source_operation_ids == ("alpha", "beta", "gamma")
    assert ready.event.text == "All done: alpha, beta and gamma."
    closing = (await scripted.batch_events(session))[-1].event
    assert isinstance(closing, BatchDrained)
    assert [m.operation_id for m in closing.settled] == ["gamma", "beta", "alpha"]


async def test_a_callback_arrives_twice(scripted: Scripted, services: Services) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(session, batch, {"op1": {}, "op2": {}})
    await scripted.commit(session, batch, "op1")
    # The callback and the HTTP answer both report op1; then the same callback is redelivered.
    await scripted.operation(
        session, "op1", OperationCommitted(result={"ok": True}, via="callback"), batch_id=batch
    )
    await scripted.commit(session, batch, "op2")
    await eventually(lambda: scripted.finals(session))
    await scripted.operation(
        session, "op2", OperationCommitted(result={"ok": True}, via="callback"), batch_id=batch
    )
    await scripted.commit(session, batch, "op1")
    await _decisions_until(scripted, session, final_delivery_id(batch), "deliver_now")
    # The coordinator and the policy have handled the late duplicates (and all they led to).
    await drained(scripted.js, scripted.topology)
    await assert_one_final(scripted, session, batch)


async def test_user_interrupts_before_hearing_the_closing(
    scripted: Scripted, services: Services
) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.open_batch(session, batch, {"a": {}, "b": {}})
    await scripted.commit(session, batch, "a")
    await scripted.commit(session, batch, "b")
    delivery = final_delivery_id(batch)
    await _decisions_until(scripted, session, delivery, "deliver_now")
    # The surface starts saying it; the user barges in; the mark comes back cleared.
    await scripted.surface(session, delivery, DeliverySent(mode="proactive", channel="voice"))
    await scripted.interaction(session, SpeechStarted(stream_ms=100))
    await scripted.surface(session, delivery, DeliveryUnheard(played_ms=300, reason="clear"))

    async def requeued_and_waiting() -> list[tuple[str, str]] | None:
        got = await scripted.decisions(session, delivery)
        return got if len(got) >= 2 and got[-1][0] == "wait_for_quiet" else None

    decisions = await eventually(requeued_and_waiting)
    assert decisions[-1] == ("wait_for_quiet", "user_speaking")
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.WAITING
    assert state.text == state.short_text == "All done."
    await scripted.interaction(session, SpeechStopped(stream_ms=1500))
    await _decisions_until(scripted, session, delivery, "deliver_now", count=2)
    decisions = await scripted.decisions(session, delivery)
    assert decisions[-1] == ("deliver_now", "channel_idle")
    await scripted.say(session, delivery)
    events = [e for e in await scripted.delivery_events(session) if e.delivery_id == delivery]
    kinds = [type(e.event).__name__ for e in events]
    # Causal order: unheard, then requeued in the short form, then decided again.
    assert kinds.index("DeliveryUnheard") < kinds.index("DeliveryRequeued")
    requeued = next(e for e in events if isinstance(e.event, DeliveryRequeued))
    assert requeued.event.text == "All done."  # type: ignore[union-attr]
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.SPOKEN
    await assert_one_final(scripted, session, batch)


async def test_channel_disconnects_with_pending_deliveries(
    scripted: Scripted, services: Services
) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.commit(session, batch, "op1")
    delivery = final_delivery_id(batch)
    await _decisions_until(scripted, session, delivery, "wait_for_quiet")
    await scripted.interaction(
        session, ChannelDisconnected(channel="voice", connection_id="call1", reason="hangup")
    )
    decisions = await _decisions_until(scripted, session, delivery, "attach_next_turn")
    assert decisions[-1][1].startswith("channel_disconnected")
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.WAITING
    # A new call on the same session hears what is still pending.
    await scripted.interaction(session, ChannelConnected(channel="voice", connection_id="call2"))
    await scripted.interaction(session, SpeechStopped(stream_ms=10))
    decisions = await _decisions_until(scripted, session, delivery, "deliver_now", timeout_s=5)
    assert decisions[-1] == ("deliver_now", "channel_idle")
    await scripted.say(session, delivery)
    await assert_one_final(scripted, session, batch)


async def test_restart_after_the_effect_and_before_the_follow_up(
    scripted: Scripted, services: Services
) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.open_batch(session, batch, {"op1": {}, "op2": {}})
    await scripted.commit(session, batch, "op1")
    services.coordinator.kill9()
    services.policy.kill9()
    # The effect lands while nobody coordinates.
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.commit(session, batch, "op2")
    services.start()
    delivery = final_delivery_id(batch)
    await _decisions_until(scripted, session, delivery, "wait_for_quiet")
    # Kill the policy while the delivery waits; the user stops meanwhile.
    services.policy.kill9()
    await scripted.interaction(session, SpeechStopped(stream_ms=700))
    services.policy.start()
    decisions = await _decisions_until(scripted, session, delivery, "deliver_now")
    assert decisions[0] == ("wait_for_quiet", "user_speaking")
    assert decisions[-1] == ("deliver_now", "channel_idle")
    await assert_one_final(scripted, session, batch)


@pytest.mark.parametrize(
    "point",
    ["coordinator.after_claim", "coordinator.after_ready", "coordinator.after_drained"],
)
async def test_coordinator_crash_at_each_step_still_closes_once(
    scripted: Scripted, services: Services, point: str
) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    services.coordinator.kill9()
    services.coordinator.env = {**services.coordinator.env, "HOLDLINE_CRASH_POINTS": point}
    services.coordinator.start()
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.commit(session, batch, "op1")
    proc = services.coordinator.proc
    assert proc is not None
    deadline = time.monotonic() + 10
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is not None, f"the coordinator did not crash at {point}"
    services.coordinator.env = {
        k: v for k, v in services.coordinator.env.items() if k != "HOLDLINE_CRASH_POINTS"
    }
    services.coordinator.start()
    await eventually(lambda: _drained(scripted, session))
    await assert_one_final(scripted, session, batch)
    await _decisions_until(scripted, session, final_delivery_id(batch), "deliver_now")


async def _drained(scripted: Scripted, session: str) -> bool:
    events = await scripted.batch_events(session)
    return any(type(e.event).__name__ == "BatchDrained" for e in events)


async def test_a_new_intent_makes_an_earlier_update_stale(
    scripted: Scripted, services: Services
) -> None:
    session = new_id("s")
    await scripted.open_session(session)
    subject = "book_table:trattoria:2026-05-01"
    first, second = new_id("b"), new_id("b")
    # "Book 21:00", the user keeps typing, then "make it 21:30" on the same subject.
    await scripted.open_batch(
        session, first,
        {"book2100": {"tool": "book_table", "subject_key": subject,
                      "arguments": {"restaurant": "trattoria", "time": "21:00"}}},
    )
    await scripted.interaction(session, UserActivity(typing=True))
    await scripted.commit(session, first, "book2100")
    old = final_delivery_id(first)
    await _decisions_until(scripted, session, old, "wait_for_quiet")
    await scripted.open_batch(
        session, second,
        {"book2130": {"tool": "book_table", "subject_key": subject,
                      "arguments": {"restaurant": "trattoria", "time": "21:30"}}},
    )
    decisions = await _decisions_until(scripted, session, old, "supersede")
    assert decisions[-1][1].startswith("stale_superseded: book2130")

    # The decision and `delivery.superseded` are two appends: read once both are stored.
    async def closed() -> DeliveryStatus | None:
        state = await scripted.delivery(session, old)
        return None if state is None or state.status is DeliveryStatus.WAITING else state.status

    assert await eventually(closed) is DeliveryStatus.SUPERSEDED
    events = [e for e in await scripted.delivery_events(session) if e.delivery_id == old]
    reconcile = [e.event for e in events if isinstance(e.event, DeliveryReconciliationRequested)]
    assert len(reconcile) == 1
    assert reconcile[0].operation_ids == ("book2100",)
    assert reconcile[0].newer_operation_id == "book2130"
    superseded = events[-1].event
    assert type(superseded).__name__ == "DeliverySuperseded"
    assert superseded.by_delivery_id == final_delivery_id(second)  # type: ignore[union-attr]
    # The newer intent closes normally once the user is quiet.
    await scripted.interaction(session, UserActivity(typing=False))
    await scripted.commit(session, second, "book2130")
    await _decisions_until(scripted, session, final_delivery_id(second), "deliver_now")
    await assert_one_final(scripted, session, first)
    await assert_one_final(scripted, session, second)


async def test_an_urgent_result_interrupts_while_a_normal_one_waits(
    scripted: Scripted, services: Services
) -> None:
    session = await _voice_session(scripted)
    normal, urgent = new_id("b"), new_id("b")
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.open_batch(session, normal, {"lookup": {"tool": "check_availability"}})
    await scripted.open_batch(
        session, urgent, {"transfer": {"tool": "transfer_money", "priority": "urgent",
                                       "arguments": {"amount": 900, "to": "acme"}}},
    )
    await scripted.commit(session, normal, "lookup")
    await _decisions_until(scripted, session, final_delivery_id(normal), "wait_for_quiet")
    await scripted.fail(session, urgent, "transfer", reason="fraud_check",
                        detail="the bank held the transfer")
    decisions = await _decisions_until(scripted, session, final_delivery_id(urgent), "interrupt")
    assert decisions == [("interrupt", "urgent: priority allows cutting in")]
    urgent_ready = await assert_one_final(scripted, session, urgent)
    assert urgent_ready.event.priority == "urgent"  # type: ignore[union-attr]
    assert "Alternative:" in urgent_ready.event.text  # type: ignore[union-attr]
    # The normal one is still waiting for the user to finish.
    assert await scripted.decisions(session, final_delivery_id(normal)) == [
        ("wait_for_quiet", "user_speaking")
    ]
    state = await scripted.delivery(session, final_delivery_id(normal))
    assert state is not None
    assert state.status is DeliveryStatus.WAITING


async def test_a_handoff_hides_a_result_owned_by_the_previous_agent(
    scripted: Scripted, services: Services
) -> None:
    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session, agent="billing")
    await scripted.open_batch(session, batch, {"refund": {"owner": "agent"}}, agent="billing")
    await scripted.interaction(session, AgentHandedOff(from_agent="billing", to_agent="support"))
    await scripted.commit(session, batch, "refund")
    delivery = final_delivery_id(batch)
    decisions = await _decisions_until(scripted, session, delivery, "suppress")
    assert decisions[-1][1].startswith("agent_not_allowed")
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.SUPPRESSED
    await assert_one_final(scripted, session, batch)


@pytest.mark.parametrize("services", [{"HOLDLINE_DELIVERY_WINDOW_MS": "700"}], indirect=True)
async def test_a_delivery_that_waits_too_long_falls_back_to_the_next_turn(
    scripted: Scripted, services: Services
) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.commit(session, batch, "op1")
    delivery = final_delivery_id(batch)
    decisions = await _decisions_until(scripted, session, delivery, "attach_next_turn")
    assert decisions[0] == ("wait_for_quiet", "user_speaking")
    assert decisions[-1][1].startswith("window_expired")
    # Pinned to the next reply: a quiet channel no longer makes it proactive.
    await scripted.interaction(session, SpeechStopped(stream_ms=5000))
    turn = new_id("turn")
    await scripted.interaction(session, TurnReceived(channel="voice", text="and?"), turn_id=turn)
    # The policy has handled the quiet channel and the turn.
    await drained(scripted.js, scripted.topology)
    assert all(d in {"wait_for_quiet", "attach_next_turn"}
               for d, _ in await scripted.decisions(session, delivery))
    # What the policy left on the stream before the surface acts: still waiting, pinned to
    # the next turn by its own decision (mode written by the policy, not by the attach).
    state = await scripted.delivery(session, delivery)
    assert state is not None
    assert state.status is DeliveryStatus.WAITING
    assert state.decision == "attach_next_turn"
    assert state.mode == "next_turn"
    decided = [e.event for e in await scripted.delivery_events(session)
               if e.delivery_id == delivery and isinstance(e.event, DeliveryDecided)]
    assert decided[-1].mode == "next_turn"
    await scripted.surface(session, delivery, DeliveryAttached(attached_to_turn_id=turn))
    await scripted.surface(session, delivery, DeliverySpoken())
    # Once attached and spoken, the policy must not decide on it again: it has handled both.
    await drained(scripted.js, scripted.topology)
    tail = [e.event for e in await scripted.delivery_events(session)
            if e.delivery_id == delivery]
    assert isinstance(tail[-1], DeliverySpoken), f"policy wrote after the spoken mark: {tail[-1]}"


async def test_progress_notes_never_outlive_the_closing(
    scripted: Scripted, services: Services
) -> None:
    session, batch = await _voice_session(scripted), new_id("b")
    await scripted.interaction(session, SpeechStarted(stream_ms=0))
    await scripted.open_batch(session, batch, {"slow": {}})
    await scripted.operation(
        session, "slow", OperationProgress(message="Still waiting on the bank."), batch_id=batch
    )

    async def progress() -> list[str] | None:
        notes = [e.delivery_id or "" for e in await scripted.delivery_events(session)
                 if isinstance(e.event, DeliveryReady) and e.event.kind == "progress"]
        return notes or None

    note = (await eventually(progress))[0]
    await _decisions_until(scripted, session, note, "wait_for_quiet")
    await scripted.commit(session, batch, "slow")
    decisions = await _decisions_until(scripted, session, note, "supersede")
    assert decisions[-1][1].startswith("final_ready")
    final = await assert_one_final(scripted, session, batch)
    # The coordinator wrote no progress note after the closing, and the policy superseded
    # the one it had, so nothing but the closing can still reach the user.
    events = await scripted.delivery_events(session)
    at = next(i for i, e in enumerate(events) if e.event_id == final.event_id)
    assert not [e for e in events[at + 1:]
                if isinstance(e.event, DeliveryReady) and e.event.kind == "progress"]
    state = await scripted.delivery(session, note)
    assert state is not None
    assert state.status is DeliveryStatus.SUPERSEDED
