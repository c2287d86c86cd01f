"""Properties of the chat turn's pure planner (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.admission import AdmissionOutcome, ToolCall
from libs.bus import EVENT_CODECS, Context
from libs.domain import OperationState, OpStatus
from libs.events import Envelope, TurnReplied
from libs.models.interface import PendingUpdate, ProposedCall, TurnReply, TurnRequest
from services.interaction_surface.chat import turn_plan
from services.interaction_surface.chat.turn_plan import Admit, Cancel, Compensate, Confirm
from services.interaction_surface.core.answers import claim_verdict

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
ops = st.text("abcdef", min_size=1, max_size=4).map(lambda s: f"op_{s}")
updates = st.lists(
    st.builds(PendingUpdate, delivery_id=ops.map(lambda s: f"d{s}"), text=st.text(max_size=20)),
    max_size=4,
    unique_by=lambda u: u.delivery_id,
)
replies = st.builds(
    TurnReply,
    text=st.text(max_size=30),
    calls=st.lists(
        st.builds(
            ProposedCall,
            tool=st.sampled_from(["provision_access", "book_table"]),
            arguments=st.fixed_dictionaries({"access": st.sampled_from(["vpn", "jira"])}),
            call_id=st.text("xyz", min_size=1, max_size=3),
        ),
        max_size=3,
    ).map(tuple),
    cancels=st.lists(ops, max_size=2).map(tuple),
    confirmations=st.lists(st.tuples(ops, st.booleans()), max_size=2).map(tuple),
    compensations=st.lists(ops, max_size=2).map(tuple),
)


def _request(pending: list[PendingUpdate], language: str = "en") -> TurnRequest:
    return TurnRequest(
        session_id="sess_1",
        turn_id="turn_1",
        agent="support",
        language=language,
        user_text="hello",
        history=(),
        tools=(),
        pending_updates=tuple(pending),
    )


@settings(max_examples=200, deadline=None)
@given(updates, st.sampled_from(["en", "es"]))
def test_a_failed_model_admits_nothing_and_apologises_with_every_update(
    pending: list[PendingUpdate], language: str
) -> None:
    plan = turn_plan.plan_turn(_request(pending, language), None, NOW)
    assert plan.actions == ()
    assert plan.reply is None
    assert plan.apology
    assert list(plan.updates) == pending


@settings(max_examples=200, deadline=None)
@given(updates, replies)
def test_every_request_of_the_reply_becomes_one_action_in_order(
    pending: list[PendingUpdate], reply: TurnReply
) -> None:
    plan = turn_plan.plan_turn(_request(pending), reply, NOW)
    expected: list[turn_plan.Action] = [Cancel(op) for op in reply.cancels]
    expected += [Confirm(op, yes) for op, yes in reply.confirmations]
    expected += [Compensate(op) for op in reply.compensations]
    if reply.calls:
        expected.append(Admit(tuple(ToolCall(c.tool, c.arguments, c.call_id) for c in reply.calls)))
    assert list(plan.actions) == expected
    assert plan.apology is None
    # At most one admission per turn: the calls are admitted together, as one batch.
    assert sum(isinstance(a, Admit) for a in plan.actions) <= 1


@settings(max_examples=200, deadline=None)
@given(updates, replies, st.text(min_size=1, max_size=20))
def test_a_doubtful_hearing_never_reaches_a_tool(
    pending: list[PendingUpdate], reply: TurnReply, question: str
) -> None:
    plan = turn_plan.plan_turn(_request(pending), reply, NOW, question=question)
    assert not any(isinstance(a, Admit) for a in plan.actions)
    assert plan.reply is not None
    if reply.calls:
        assert plan.reply.text == question
        assert plan.reply.attached == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(ops, max_size=4), st.lists(st.booleans(), min_size=4, max_size=4))
def test_only_a_started_undo_counts_as_undone(asked: list[str], started: list[bool]) -> None:
    results: list[tuple[turn_plan.Action, AdmissionOutcome]] = [
        (
            Compensate(op),
            AdmissionOutcome(f"comp_{op}" if ok else op, "revoke_access", "admitted", None),
        )
        for op, ok in zip(asked, started, strict=False)
    ]
    results.append((Cancel("op_x"), AdmissionOutcome("op_y", "t", "cancel_requested", None)))
    undone = turn_plan.undone(results)
    assert set(undone) == {op for op, ok in zip(asked, started, strict=False) if ok}
    assert all(v == f"comp_{k}" for k, v in undone.items())


@settings(max_examples=100, deadline=None)
@given(updates)
def test_nothing_is_stale_when_the_turn_replaced_and_undid_nothing(
    pending: list[PendingUpdate],
) -> None:
    outcomes = [AdmissionOutcome("op_1", "provision_access", "admitted", "batch_1")]
    live, refused = turn_plan.stale_updates("sess_1", pending, lambda _: None, outcomes, {})
    assert live == pending
    assert refused == []


def test_an_id_from_another_session_never_names_its_resource() -> None:
    other = OperationState(
        "op_1", "sess_other", OpStatus.ADMITTED, "provision_access", {"access": "secret"}
    )
    outcome = AdmissionOutcome("op_1", "provision_access", "admitted", "batch_1")
    note = turn_plan.admission_note(
        outcome, other, "sess_1", lambda tool, args: f"{tool}:{args['access']}"
    )
    assert "secret" not in note.label
    own = turn_plan.admission_note(
        outcome,
        OperationState("op_1", "sess_1", OpStatus.ADMITTED, "provision_access", {"access": "vpn"}),
        "sess_1",
        lambda tool, args: f"{tool}:{args['access']}",
    )
    assert own.label == "provision_access:vpn"


def test_a_repeated_tool_call_id_waits_for_a_live_claim_and_takes_a_dead_one() -> None:
    answered = {"state": "answered", "answer": {"text": "ok"}}
    assert claim_verdict(answered, 1000.0, 30.0) == "answered"
    # Given back by a failed first request (deleted): this request runs the turn.
    assert claim_verdict(None, 1000.0, 30.0) == "take"
    assert claim_verdict({"state": "pending", "at": 990.0}, 1000.0, 30.0) == "wait"
    assert claim_verdict({"state": "pending", "at": 970.0}, 1000.0, 30.0) == "take"
    # A claim written before claims carried their time is waited for, never taken.
    assert claim_verdict({"state": "pending"}, 1000.0, 30.0) == "wait"


def test_a_repeated_client_turn_id_is_answered_from_the_log_or_waits_or_runs_again() -> None:
    now = datetime(2026, 1, 1, 12, tzinfo=UTC)
    expiry = timedelta(seconds=30)
    live = ("turn_1", now - timedelta(seconds=5))
    dead = ("turn_1", now - timedelta(seconds=31))
    other = ("turn_2", now - timedelta(seconds=5))

    def opening(
        repeat_of: str | None, replied: bool, open_turn: tuple[str, datetime] | None
    ) -> str:
        return turn_plan.opening(
            repeat_of=repeat_of, replied=replied, open_turn=open_turn, now=now, expiry=expiry
        )

    # A new id opens, or waits for another open turn like any turn.
    assert opening(None, False, None) == "open"
    assert opening(None, False, other) == "wait"
    # Replied: the answer is in the log, even while a later turn of the session is open.
    assert opening("turn_1", True, None) == "answered"
    assert opening("turn_1", True, other) == "answered"
    # Its first run still open: wait for that run's reply; once it expired, run again.
    assert opening("turn_1", False, live) == "wait_repeat"
    assert opening("turn_1", False, dead) == "open"
    # Its first run died unreplied and another turn is open now: wait as for any turn.
    assert opening("turn_1", False, other) == "wait"


def test_a_repeat_answer_rebuilt_from_the_reply_equals_the_first_answer() -> None:
    outcomes = [
        AdmissionOutcome("op_1", "provision_access", "admitted", "batch_1"),
        AdmissionOutcome("", "provision_access", "rejected", None, reason="invalid"),
        AdmissionOutcome("op_2", "book_table", "awaiting_confirmation", "batch_1"),
    ]
    operations = turn_plan.replied_operations(outcomes)
    assert [o.operation_id for o in operations] == ["op_1", "op_2"]
    for channel in ("chat", "voice"):
        first = turn_plan.answer(
            turn_id="turn_1", text="On it.", response_id="resp_1", operations=operations,
            attached_delivery_ids=["dl_1"], channel=channel,
        )
        reply = Envelope(
            event_id="ev_1", occurred_at=datetime(2026, 1, 1, tzinfo=UTC), session_id="sess_1",
            turn_id="turn_1", response_id="resp_1",
            event=TurnReplied(
                text="On it.", operation_ids=("op_1", "op_2"),
                attached_delivery_ids=("dl_1",), operations=operations,
            ),
        )
        # Through the wire format, as the view decodes it from the stream.
        decoded = EVENT_CODECS[Context.INTERACTION].decode(
            EVENT_CODECS[Context.INTERACTION].encode(reply)
        )
        assert turn_plan.answer_of_reply(decoded, channel) == first
        assert ("attached_delivery_ids" in first) == (channel == "voice")
