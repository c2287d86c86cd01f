"""The pure parts: batch decider, channel projection, relevance gate, choose_delivery,
sync mode and the summary model. Hypothesis runs many examples here, cheaply."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from demo.models import MockModel
from libs.domain import batch as batch_domain
from libs.domain import delivery as delivery_domain
from libs.domain.batch import BatchState, CloseBatch, MemberStatus, final_delivery_id
from libs.domain.channel import ChannelState, OperationFacts, evolve_channel
from libs.domain.delivery import DeliveryState, DeliveryStatus
from libs.domain.delivery_gate import GateView, choose_delivery, decide_delivery
from libs.domain.gate_policy import GatePolicy, parse_quiet_rules
from libs.domain.sync_mode import sync_mode
from libs.events import (
    BatchDrained,
    BatchMemberSettled,
    BatchOpened,
    ChannelConnected,
    ChannelDisconnected,
    DeliveryDecided,
    DeliveryReady,
    DeliveryRequeued,
    DeliverySuperseded,
    Envelope,
    PlaybackFinished,
    PlaybackStarted,
    SessionOpened,
    SpeechStarted,
    SpeechStopped,
    TurnReceived,
    TurnReplied,
)
from libs.models import OperationOutcome, get_model
from services.batch_coordinator.domain import needs_model, short_summary, template_summary

T0 = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = GatePolicy(min_quiet_ms=650, window_ms=30_000)


def _env(event: Any, at: datetime = T0, **ids: Any) -> Envelope[Any]:
    return Envelope(event_id="e", occurred_at=at, session_id="s1", event=event, **ids)


def _delivery(**changes: Any) -> DeliveryState:
    base: dict[str, Any] = {
        "delivery_id": "d1", "session_id": "s1", "batch_id": "b1",
        "status": DeliveryStatus.PENDING, "kind": "final", "priority": "normal",
        "text": "All done: a.", "short_text": "All done.", "ready_at": T0,
        "source_operation_ids": ("a",),
    }
    return DeliveryState(**{**base, **changes})


# ------------------------------------------------------------------ batch


@settings(max_examples=300, deadline=None)
@given(
    members=st.integers(min_value=1, max_value=4),
    steps=st.lists(st.tuples(st.integers(0, 3), st.sampled_from(
        ["committed", "failed_final", "cancelled", "rejected"]), st.booleans()), max_size=16),
)
def test_batch_decider_closes_at_most_once_and_only_when_every_member_is_terminal(
    members: int, steps: list[tuple[int, MemberStatus, bool]]
) -> None:
    ops = tuple(f"op{i}" for i in range(members))
    state = batch_domain.evolve(None, _env(BatchOpened(operation_ids=ops), batch_id="b1"))
    history = [_env(BatchOpened(operation_ids=ops), batch_id="b1")]
    # What the coordinator folds from the operations stream: first terminal status, and where.
    terminal: dict[str, MemberStatus] = {}
    order: dict[str, int] = {}
    drained = 0
    for seq, (index, status, restart) in enumerate(steps, start=1):
        if restart:
            # A restart rebuilds the state from the appended events alone.
            rebuilt: BatchState | None = None
            for env in history:
                rebuilt = batch_domain.evolve(rebuilt, env)
            assert rebuilt == state
        op = f"op{index % members}"
        terminal.setdefault(op, status)
        order.setdefault(op, seq)
        settled = batch_domain.settlement(state, terminal, order)
        if settled is None:
            assert state.closed or any(m not in terminal for m in ops)
            continue
        assert settled == {m: terminal[m] for m in ops}
        assert list(settled) == sorted(ops, key=order.__getitem__), "in the order reached"
        for event in batch_domain.decide(state, CloseBatch(final_delivery_id("b1"), settled)):
            drained += 1
            history.append(_env(event, batch_id="b1"))
            state = batch_domain.evolve(state, history[-1])
    assert drained <= 1
    assert drained == (1 if all(m in terminal for m in ops) else 0)
    closes = [e.event for e in history if isinstance(e.event, BatchDrained)]
    assert len(closes) == drained
    if closes:
        assert state.closed
        assert state.drained
        assert [(m.operation_id, m.status) for m in closes[0].settled] == sorted(
            terminal.items(), key=lambda item: order[item[0]]
        )
        assert (closes[0].committed, closes[0].failed) == (
            sum(1 for v in terminal.values() if v == "committed"),
            sum(1 for v in terminal.values() if v != "committed"),
        )


def test_a_batch_closes_only_with_every_member_and_shows_members_settled_before() -> None:
    opened = batch_domain.evolve(None, _env(BatchOpened(operation_ids=("a", "b")), batch_id="b1"))
    assert batch_domain.decide(opened, CloseBatch("d1", {"a": "committed"})) == []
    shown = batch_domain.as_settled_so_far(opened, {"a": "committed", "z": "rejected"})
    assert dict(shown.settled) == {"a": "committed"}
    assert not shown.drained
    assert not shown.closed
    # A batch of an earlier version settled its members in its own log, which stands.
    old = batch_domain.evolve(opened, _env(
        BatchMemberSettled(member_operation_id="a", status="failed_final"), batch_id="b1"
    ))
    assert batch_domain.settlement(old, {"a": "committed"}, {}) is None
    assert batch_domain.settlement(old, {"a": "committed", "b": "committed"}, {}) == {
        "a": "failed_final", "b": "committed"
    }


def test_the_final_delivery_id_is_a_stable_subject_token() -> None:
    assert final_delivery_id("b1") == final_delivery_id("b1")
    assert final_delivery_id("b1") != final_delivery_id("b2")
    assert batch_domain.claim_key(batch_domain.final_delivery_key("b1")) == "batch.b1.final"


# ------------------------------------------------------------------ channel + gate


def test_choose_delivery_follows_seed_002_in_order() -> None:
    idle = ChannelState(session_id="s1")
    now = T0 + timedelta(seconds=1)

    def pick(channel: ChannelState, **changes: Any) -> tuple[str, str]:
        got = choose_delivery(_delivery(**changes), channel, now, min_quiet_ms=650,
                              window_ms=30_000)
        return got.decision, got.reason.split(":")[0]

    speaking = ChannelState(session_id="s1", user_speaking=True)
    assert pick(speaking, priority="urgent") == ("interrupt", "urgent")
    assert pick(speaking) == ("wait_for_quiet", "user_speaking")
    just_stopped = ChannelState(session_id="s1", user_stopped_at=now - timedelta(milliseconds=100))
    assert pick(just_stopped) == ("wait_for_quiet", "quiet_window")
    assert pick(ChannelState(session_id="s1", playback_active=True)) == (
        "after_playback", "playback_active")
    assert pick(ChannelState(session_id="s1", open_turn_id="t2")) == (
        "attach_next_turn", "turn_open")
    assert pick(idle) == ("deliver_now", "channel_idle")
    hung_up = ChannelState(session_id="s1", last_kind="voice")
    assert pick(hung_up) == ("attach_next_turn", "channel_disconnected")


def test_waiting_past_the_window_falls_back_to_next_turn() -> None:
    speaking = ChannelState(session_id="s1", user_speaking=True)
    late = T0 + timedelta(seconds=31)
    got = choose_delivery(_delivery(), speaking, late, min_quiet_ms=650, window_ms=30_000)
    assert (got.decision, got.mode, got.resync) == ("attach_next_turn", "next_turn", True)
    progress = choose_delivery(_delivery(kind="progress"), speaking, late, min_quiet_ms=650,
                               window_ms=30_000)
    assert progress.decision == "suppress"


def test_quiet_rules_pick_the_most_specific_match() -> None:
    policy = GatePolicy(
        min_quiet_ms=650,
        rules=parse_quiet_rules("voice:*:*=800, voice:es:*=900, *:*:transfer_money=1200"),
    )
    assert policy.quiet_ms("chat", "en", "book_table") == 650
    assert policy.quiet_ms("voice", "en", "book_table") == 800
    assert policy.quiet_ms("voice", "es", "book_table") == 900
    assert policy.quiet_ms("chat", "es", "transfer_money") == 1200
    with pytest.raises(ValueError, match="channel:language:domain"):
        parse_quiet_rules("voice=3")


def _facts(op: str, seq: int, **changes: Any) -> OperationFacts:
    return OperationFacts(**{"operation_id": op, "session_id": "s1", "batch_id": f"b-{op}",
                             "user_id": "u1", "admitted_seq": seq, "agent": "a1", **changes})


def test_relevance_supersedes_a_result_of_an_older_intent() -> None:
    old = _facts("a", 10, subject_key="R|D")
    newer = _facts("b", 20, subject_key="R|D")
    view = GateView(channel=ChannelState(session_id="s1", user_id="u1"),
                       ops={"a": old, "b": newer}, session_ops=(old, newer))
    outcome = decide_delivery(_delivery(), view, T0, POLICY)
    kinds = [type(e).__name__ for e in outcome.events]
    assert kinds == ["DeliveryReconciliationRequested", "DeliveryDecided", "DeliverySuperseded"]
    superseded = outcome.events[-1]
    assert isinstance(superseded, DeliverySuperseded)
    assert superseded.by_delivery_id == final_delivery_id("b-b")
    assert outcome.stale


@pytest.mark.parametrize(
    ("facts", "channel", "code"),
    [
        (_facts("a", 1, user_id="u2"), ChannelState(session_id="s1", user_id="u1"), "wrong_user"),
        (_facts("a", 1, owner="agent"), ChannelState(session_id="s1", agent="a2"),
         "agent_not_allowed"),
        (_facts("a", 1, compensated_by="undo1"), ChannelState(session_id="s1"),
         "needs_reconciliation"),
        (_facts("a", 1), ChannelState(session_id="s1", closed=True), "session_closed"),
    ],
)
def test_relevance_suppresses_with_a_reason(
    facts: OperationFacts, channel: ChannelState, code: str
) -> None:
    view = GateView(channel=channel, ops={"a": facts}, session_ops=(facts,))
    outcome = decide_delivery(_delivery(), view, T0, POLICY)
    decided = [e for e in outcome.events if isinstance(e, DeliveryDecided)]
    assert decided[0].decision == "suppress"
    assert decided[0].reason.startswith(code)


def test_an_unchanged_decision_appends_nothing() -> None:
    view = GateView(channel=ChannelState(session_id="s1", user_speaking=True), ops={})
    first = decide_delivery(_delivery(), view, T0, POLICY)
    assert len(first.events) == 1
    decided = first.events[0]
    assert isinstance(decided, DeliveryDecided)
    waiting = delivery_domain.evolve(_delivery(), _env(decided, delivery_id="d1"))
    assert decide_delivery(waiting, view, T0 + timedelta(seconds=1), POLICY).events == []


@pytest.mark.parametrize(
    ("reason", "said_again"),
    [("barge_in", "All done."), ("call_ended", "All done."), ("user_speaking", "All done: a.")],
)
def test_an_unheard_closing_comes_back_shorter_unless_it_never_started(
    reason: str, said_again: str
) -> None:
    unheard = _delivery(status=DeliveryStatus.UNHEARD, reason=reason, unheard=1)
    view = GateView(channel=ChannelState(session_id="s1"), ops={})
    outcome = decide_delivery(unheard, view, T0, POLICY)
    requeued = outcome.events[0]
    assert isinstance(requeued, DeliveryRequeued)
    assert requeued.text == said_again


_CHANNEL_EVENTS = st.sampled_from([
    SpeechStarted(stream_ms=0), SpeechStopped(stream_ms=0),
    PlaybackStarted(text="x", duration_ms=10), PlaybackFinished(heard=True, played_ms=10),
    TurnReceived(channel="voice", text="hi"), TurnReplied(text="ok"),
])


@settings(max_examples=400, deadline=None)
@given(
    steps=st.lists(st.tuples(_CHANNEL_EVENTS, st.integers(0, 2000)), max_size=20),
    urgent=st.booleans(),
)
def test_nothing_is_said_while_the_user_speaks_unless_urgent(
    steps: list[tuple[Any, int]], urgent: bool
) -> None:
    now = T0
    channel = evolve_channel(None, _env(SessionOpened(user_id="u1", tenant_id="t", agent="a",
                                                      token_hash="h")))
    channel = evolve_channel(channel, _env(ChannelConnected(channel="voice", connection_id="c")))
    delivery = _delivery(priority="urgent" if urgent else "normal", ready_at=T0)
    for event, gap_ms in steps:
        now += timedelta(milliseconds=gap_ms)
        channel = evolve_channel(channel, _env(event, at=now, turn_id="t"))
        view = GateView(channel=channel, ops={})
        outcome = decide_delivery(delivery, view, now, POLICY)
        for out in outcome.events:
            if isinstance(out, DeliveryDecided) and out.decision in ("deliver_now", "interrupt"):
                assert not channel.user_speaking or out.decision == "interrupt"
                assert out.decision != "interrupt" or urgent
                if out.decision == "deliver_now" and channel.user_stopped_at is not None:
                    assert now - channel.user_stopped_at >= timedelta(milliseconds=650)
            delivery = delivery_domain.evolve(delivery, _env(out, at=now, delivery_id="d1"))
        if delivery.handed_off:
            # The surface said it; the next closing is another delivery.
            delivery = _delivery(priority=delivery.priority, ready_at=now)


def test_a_call_that_died_mid_sentence_leaves_no_caller_speaking() -> None:
    channel = evolve_channel(None, _env(SessionOpened(user_id="u1", tenant_id="t", agent="a",
                                                      token_hash="h")))
    for event in (
        ChannelConnected(channel="voice", connection_id="call_1"),
        ChannelConnected(channel="agent", connection_id="agent_1"),
        SpeechStarted(stream_ms=40),
    ):
        channel = evolve_channel(channel, _env(event))
    # Another channel leaving says nothing of the caller.
    gone_agent = evolve_channel(
        channel, _env(ChannelDisconnected(channel="agent", connection_id="agent_1"))
    )
    assert gone_agent.user_speaking
    # The call's end recorded for a dead surface: no speech.stopped ever came.
    gone = evolve_channel(
        gone_agent,
        _env(ChannelDisconnected(channel="voice", connection_id="call_1", reason="owner_lost")),
    )
    assert not gone.user_speaking
    # The caller's next call gets what is owed at once, not after a turn.
    back = evolve_channel(gone, _env(ChannelConnected(channel="voice", connection_id="call_2")))
    view = GateView(channel=back, ops={})
    [decided] = decide_delivery(_delivery(ready_at=T0), view, T0, POLICY).events
    assert isinstance(decided, DeliveryDecided)
    assert decided.decision == "deliver_now"
    # Called back before the dead call's end was recorded: the new call is not speaking.
    again = evolve_channel(
        gone_agent, _env(ChannelConnected(channel="voice", connection_id="call_2"))
    )
    assert not again.user_speaking


# ------------------------------------------------------------------ sync mode


def test_sync_mode_reads_the_latest_closing() -> None:
    opened = batch_domain.evolve(None, _env(BatchOpened(operation_ids=("a",)), batch_id="b1"))
    closed = batch_domain.evolve(opened, _env(BatchDrained(final_delivery_id="d1", committed=1,
                                                           failed=0), batch_id="b1"))
    assert sync_mode() == "idle"
    assert sync_mode([opened], []) == "aggregating"
    ready = delivery_domain.evolve(None, _env(DeliveryReady(
        kind="final", text="x", short_text="x", source_operation_ids=("a",)), delivery_id="d1"))
    assert sync_mode([closed], [ready]) == "queued_final"

    def decided(decision: str, mode: str | None = None) -> DeliveryState:
        return delivery_domain.evolve(ready, _env(DeliveryDecided(
            decision=decision, reason="r", mode=mode), delivery_id="d1"))  # type: ignore[arg-type]

    assert sync_mode([closed], [decided("wait_for_quiet")]) == "waiting"
    assert sync_mode([closed], [decided("attach_next_turn", "next_turn")]) == "next_turn"
    said = _delivery(status=DeliveryStatus.SPOKEN, mode="proactive")
    assert sync_mode([closed], [said]) == "proactive"
    assert sync_mode([closed], [_delivery(status=DeliveryStatus.SPOKEN, mode="next_turn")]) == (
        "next_turn")


# ------------------------------------------------------------------ summaries


async def test_success_uses_the_template_and_failures_the_model() -> None:
    ok = [OperationOutcome("a", "provision_access", "alpha", "committed"),
          OperationOutcome("b", "provision_access", "beta", "committed")]
    assert not needs_model(ok)
    assert template_summary(ok, "en") == "All done: alpha and beta."
    assert short_summary(ok, "en") == "All done."
    failed = [
        *ok, OperationOutcome("c", "provision_access", "gamma", "rejected", "over_limit: 8 max")
    ]
    assert needs_model(failed)
    text = await get_model("mock").explain_failures(failed, language="en")
    assert text == (
        "Done: alpha and beta. I could not complete gamma (8 max). Alternative: I can try "
        "gamma again in a few minutes, when the limit frees up."
    )
    assert short_summary(failed, "en") == "2 of 3 done."
    spanish = await MockModel().explain_failures(failed, language="es")
    assert "Alternativa:" in spanish
