"""Properties of the pure admission planner and follow-up deciders (no broker).

Turns are planned against a real in-memory `LoadView`, and their events are folded into it
the way the shell would after writing them (claims aside: they are the KV shell's part).
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from demo.tools import AccessItem
from libs.admission import LoadView
from libs.admission.answers import outcome
from libs.admission.followups import decide_cancel
from libs.admission.plan import fresh, plan_admission
from libs.admission.plan_types import REUSABLE, ToolCall, TurnContext
from libs.admission.writes import batch_opened, envelope, plan_events, plan_ids
from libs.domain import OperationState, OpStatus
from libs.events import (
    OperationAdmitted,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationRejected,
    OperationRequested,
)
from libs.tools import Limits, ToolDeclaration, ToolRegistry

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
CAP = 3


def _registry() -> ToolRegistry:
    registry = ToolRegistry()
    common: dict[str, Any] = {
        "arguments": AccessItem,
        "executor": "sandbox.access",
        "roles": {"access": "resource"},
    }
    registry.declare(ToolDeclaration(name="open_access", description="allow", **common))
    registry.declare(
        ToolDeclaration(
            name="strict_access", description="reject", duplicate_policy="reject", **common
        )
    )
    registry.declare(
        ToolDeclaration(
            name="capped_access",
            description="capped",
            limits=Limits(per_user_open=CAP),
            overflow="reject",
            **common,
        )
    )
    registry.declare(
        ToolDeclaration(name="hidden_access", description="internal", internal=True, **common)
    )
    registry.declare(
        ToolDeclaration(name="urgent_access", description="urgent", priority="urgent", **common)
    )
    return registry


REGISTRY = _registry()
TOOLS = [
    "open_access", "strict_access", "capped_access", "hidden_access", "urgent_access",
    "no_such_tool",
]

calls = st.builds(
    ToolCall,
    tool=st.sampled_from(TOOLS),
    arguments=st.fixed_dictionaries(
        {"access": st.sampled_from(["github", "jira", "slack", "vpn", "Not Valid!"])}
    ),
    tool_call_id=st.none() | st.text("abc", min_size=1, max_size=3),
)
turns = st.lists(st.lists(calls, max_size=6), min_size=1, max_size=5)


def _ctx(n: int) -> TurnContext:
    return TurnContext(f"sess_{n % 2}", f"turn_{n}", "acme", "ana", "support")


def _ids() -> Any:
    counter = itertools.count()
    return lambda prefix: f"{prefix}_{next(counter)}"


def _write(view: LoadView, ctx: TurnContext, turn_plans: Any, new_id: Any, seq: Any) -> None:
    """Fold a turn's events into the view, as the shell does after appending them."""
    for plan in fresh(list(turn_plans)):
        for event in plan_events(ctx, plan, NOW):
            env = envelope(ctx, event, NOW, new_id("ev"), **plan_ids(plan, "batch_x"))
            view.apply(env, next(seq))


def _run(script: list[list[ToolCall]]) -> tuple[LoadView, list[Any]]:
    view, new_id, seq = LoadView(), _ids(), itertools.count(1)
    planned = []
    for n, calls_of_turn in enumerate(script):
        ctx = _ctx(n)
        turn = plan_admission(
            ctx, calls_of_turn, registry=REGISTRY, view=view, now=NOW, new_id=new_id
        )
        planned.append((ctx, turn))
        _write(view, ctx, turn.plans, new_id, seq)
    return view, planned


def _standing(view: LoadView) -> list[OperationState]:
    return [
        s
        for s in view.projection.states.values()
        if s.status not in REUSABLE and s.status is not OpStatus.COMMITTED
    ]


@settings(max_examples=150, deadline=None)
@given(turns)
def test_a_duplicate_intent_never_plans_a_second_operation(script: list[list[ToolCall]]) -> None:
    view, planned = _run(script)
    per_intent: dict[str, set[str]] = {}
    for _, turn in planned:
        for plan in turn.plans:
            state = view.get(plan.operation_id)
            # A repeat of a refused request in the same turn joins the refusal: not an operation.
            refused = state is not None and state.status in REUSABLE
            if plan.kind in ("admit", "confirm", "existing") and plan.intent_key and not refused:
                per_intent.setdefault(plan.intent_key, set()).add(plan.operation_id)
    # Nothing ever settles here, so every intent keeps the first operation planned for it.
    assert all(len(ops) == 1 for ops in per_intent.values()), per_intent
    keys = [s.intent_key for s in _standing(view) if s.intent_key]
    assert len(keys) == len(set(keys))


@settings(max_examples=150, deadline=None)
@given(turns)
def test_capacity_is_never_over_admitted(script: list[list[ToolCall]]) -> None:
    view, planned = _run(script)
    assert view.load("capped_access", "acme", "ana").user_open <= CAP
    for _, turn in planned:
        admits = [p for p in turn.plans if p.kind == "admit" and p.existing is None]
        # A reservation for each new admission (and an in-turn repeat of one), no more.
        assert len({p.operation_id for p in admits}) <= len(turn.reservations) <= len(turn.plans)
        assert all(p.kind != "admit" or p.declaration is not None for p in turn.plans)


@settings(max_examples=150, deadline=None)
@given(turns)
def test_a_batch_opens_with_the_words_its_members_open_with(script: list[list[ToolCall]]) -> None:
    # The coordinator words a closing from `batch.opened` instead of the admissions: what
    # it names of each member must be what that member's first event says.
    _, planned = _run(script)
    for ctx, turn in planned:
        members = fresh(list(turn.plans))
        opened = batch_opened(members)
        assert opened.operation_ids == tuple(p.operation_id for p in members)
        named = zip(opened.tools, opened.arguments, opened.priorities, strict=True)
        for plan, (tool, arguments, priority) in zip(members, named, strict=True):
            first = plan_events(ctx, plan, NOW)[0]
            match first:
                case OperationAdmitted():
                    assert (tool, arguments, priority) == (
                        first.tool, first.arguments, first.priority
                    )
                case OperationRequested():
                    assert (tool, arguments) == (first.tool, first.arguments)
                case OperationRejected():
                    assert tool == first.tool
                case _:
                    raise AssertionError(first)


@settings(max_examples=150, deadline=None)
@given(turns)
def test_a_refused_plan_emits_a_reason(script: list[list[ToolCall]]) -> None:
    _, planned = _run(script)
    for ctx, turn in planned:
        for plan in fresh(list(turn.plans)):
            if plan.kind != "reject":
                continue
            assert plan.reason is not None
            assert plan.detail
            (event,) = plan_events(ctx, plan, NOW)
            assert isinstance(event, OperationRejected)
            assert event.reason == plan.reason
            told = outcome(plan, "batch_x", ctx.session_id, None)
            assert told.status == OpStatus.REJECTED.value
            assert told.reason == plan.reason
            assert told.supersedes == ()


@settings(max_examples=100, deadline=None)
@given(turns, st.lists(calls, max_size=6))
def test_planning_reads_the_view_and_changes_nothing(
    script: list[list[ToolCall]], last: list[ToolCall]
) -> None:
    view, _ = _run(script)
    ctx = _ctx(99)
    before = view.load("capped_access", "acme", "ana")
    first = plan_admission(ctx, last, registry=REGISTRY, view=view, now=NOW, new_id=_ids())
    second = plan_admission(ctx, last, registry=REGISTRY, view=view, now=NOW, new_id=_ids())
    assert first == second
    assert view.load("capped_access", "acme", "ana") == before


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from(list(OpStatus)),
    st.text(min_size=1, max_size=8),
    st.none() | st.just("revoke_access"),
)
def test_cancel_appends_at_most_one_event_and_explains_a_refusal(
    status: OpStatus, reason: str, compensating: str | None
) -> None:
    state = OperationState("op_1", "sess_0", status, "open_access", {"access": "vpn"})
    decision = decide_cancel(
        "op_1", state, user_id="ana", reason=reason, compensating_tool=compensating
    )
    assert (decision.event is None) != (decision.answer is None)
    if status is OpStatus.CANCEL_REQUESTED:
        assert decision.answer is not None
        assert decision.answer.existing
    elif state.terminal:
        assert isinstance(decision.event, OperationCancelRefused)
        assert decision.event.reason
        offered = decision.event.compensating_tool
        assert offered == (compensating if status is OpStatus.COMMITTED else None)
    else:
        assert isinstance(decision.event, OperationCancelRequested)
        assert decision.event.reason == reason


def test_no_operation_to_cancel_is_answered_without_an_event() -> None:
    decision = decide_cancel("op_9", None, user_id="ana", reason="x", compensating_tool=None)
    assert decision.event is None
    assert decision.answer is not None
    assert decision.answer.reason == "unknown_operation"


def test_capacity_counts_the_items_planned_earlier_in_the_same_turn() -> None:
    ctx = _ctx(0)
    many = [ToolCall("capped_access", {"access": a}) for a in ("github", "jira", "slack", "vpn")]
    turn = plan_admission(ctx, many, registry=REGISTRY, view=LoadView(), now=NOW, new_id=_ids())
    kinds = [p.kind for p in turn.plans]
    assert kinds == ["admit"] * CAP + ["reject"]
    assert turn.plans[-1].reason == "backpressure"
    assert len(turn.reservations) == CAP
