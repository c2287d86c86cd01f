"""Properties of the chat turn's pure planner (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.admission import Outcome, ToolCall
from libs.domain import OperationState, OpStatus
from libs.models.interface import PendingUpdate, ProposedCall, TurnReply, TurnRequest
from services.interaction_surface.answers import claim_verdict
from services.interaction_surface.chat import turn_plan
from services.interaction_surface.chat.turn_plan import Admit, Cancel, Compensate, Confirm

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
    results: list[tuple[turn_plan.Action, Outcome]] = [
        (
            Compensate(op),
            Outcome(f"comp_{op}" if ok else op, "revoke_access", "admitted", None),
        )
        for op, ok in zip(asked, started, strict=False)
    ]
    results.append((Cancel("op_x"), Outcome("op_y", "t", "cancel_requested", None)))
    undone = turn_plan.undone(results)
    assert set(undone) == {op for op, ok in zip(asked, started, strict=False) if ok}
    assert all(v == f"comp_{k}" for k, v in undone.items())


@settings(max_examples=100, deadline=None)
@given(updates)
def test_nothing_is_stale_when_the_turn_replaced_and_undid_nothing(
    pending: list[PendingUpdate],
) -> None:
    outcomes = [Outcome("op_1", "provision_access", "admitted", "batch_1")]
    live, refused = turn_plan.stale_updates("sess_1", pending, lambda _: None, outcomes, {})
    assert live == pending
    assert refused == []


def test_an_id_from_another_session_never_names_its_resource() -> None:
    other = OperationState(
        "op_1", "sess_other", OpStatus.ADMITTED, "provision_access", {"access": "secret"}
    )
    outcome = Outcome("op_1", "provision_access", "admitted", "batch_1")
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


def test_a_repeated_client_turn_id_waits_for_a_live_claim_and_takes_a_dead_one() -> None:
    answered = {"state": "answered", "answer": {"text": "ok"}}
    assert claim_verdict(answered, 1000.0, 30.0) == "answered"
    # Given back by a failed first request (deleted): this request runs the turn.
    assert claim_verdict(None, 1000.0, 30.0) == "take"
    assert claim_verdict({"state": "pending", "at": 990.0}, 1000.0, 30.0) == "wait"
    assert claim_verdict({"state": "pending", "at": 970.0}, 1000.0, 30.0) == "take"
    # A claim written before claims carried their time is waited for, never taken.
    assert claim_verdict({"state": "pending"}, 1000.0, 30.0) == "wait"
