"""The operation kinds each consumer asks the broker for cover everything its handler and its
fold use: a kind left out must change nothing they read, whatever state it arrives in."""

from __future__ import annotations

import typing
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import msgspec

from libs.bus import Topology
from libs.domain import OperationFacts, OperationState, OpStatus
from libs.domain import operation as operation_domain
from libs.domain.batch import member_status
from libs.domain.channel import FACT_EVENTS, evolve_facts
from libs.events import (
    OperationAdmitted,
    OperationCompensated,
    OperationEvent,
    OperationProgress,
)
from services.batch_coordinator.domain import COORDINATED
from services.operation_worker.domain import DISPATCHED, policy
from testkit.events import envelope

ALL: tuple[type[Any], ...] = typing.get_args(OperationEvent)


def _value(info: msgspec.inspect.Type) -> Any:
    match info:
        case msgspec.inspect.StrType():
            return "x"
        case msgspec.inspect.BoolType():
            return False
        case msgspec.inspect.IntType():
            return 1
        case msgspec.inspect.FloatType():
            return 1.0
        case msgspec.inspect.DictType() | msgspec.inspect.AnyType():
            return {}
        case msgspec.inspect.LiteralType(values=values):
            return values[0]
        case msgspec.inspect.DateTimeType():
            return "2026-01-01T00:00:00Z"
        case msgspec.inspect.UnionType(types=types):
            return _value(next(t for t in types if not isinstance(t, msgspec.inspect.NoneType)))
    raise AssertionError(f"no sample for {info}")


def sample(cls: type[Any]) -> Any:
    """One instance of an event type, its required fields filled."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    fields = {f.name: _value(f.type) for f in info.fields if f.required}
    return msgspec.convert(fields, cls)


def test_every_kind_is_a_distinct_subject_token() -> None:
    topology = Topology("hl")
    filters = topology.operation_kinds_filter(ALL)
    assert len(filters) == len(ALL)
    assert "hl.operations.*.*.committed" in filters
    assert "hl.operations.*.*.failed_final" in filters


def test_the_dispatcher_takes_exactly_the_kinds_its_policy_turns_into_work() -> None:
    assert {cls for cls in ALL if policy(sample(cls))} == set(DISPATCHED)


def test_a_kind_the_delivery_policy_leaves_out_changes_no_fact() -> None:
    # The handler re-evaluates on admitted and compensated: both are asked for.
    assert {OperationAdmitted, OperationCompensated} <= set(FACT_EVENTS)
    known = [
        OperationFacts(operation_id="op1", session_id="s1", tool="t", admitted_seq=3),
        OperationFacts(
            operation_id="op1", session_id="s1", tool="t", admitted_seq=3, subject_key="k",
            user_id="u1", owner="agent", agent="a1", compensated_by="op2",
        ),
    ]
    for cls in ALL:
        if cls in FACT_EVENTS:
            continue
        env = envelope(sample(cls), operation_id="op1")
        for facts in known:
            assert evolve_facts(facts, env, 9) == facts, cls


def test_a_kind_the_coordinator_leaves_out_changes_no_closing_field() -> None:
    # The handler acts on terminal kinds and progress: both are asked for.
    for cls in ALL:
        if member_status(sample(cls)) is not None or cls is OperationProgress:
            assert cls in COORDINATED, cls
    at = datetime(2026, 1, 1, tzinfo=UTC)
    base = OperationState(
        operation_id="op1", session_id="s1", status=OpStatus.ADMITTED, tool="t",
        arguments={"a": 1}, result={"r": 1}, failure="f", admitted_at=at,
    )
    left_out = [cls for cls in ALL if cls not in COORDINATED]
    assert left_out, "the coordinator asks for every kind"
    # The admission's words (tool, arguments, priority) reach the coordinator in
    # `batch.opened` instead (tests/unit/batch_coordinator/test_member_view.py).
    assert OperationAdmitted in left_out
    for cls in left_out:
        if cls is OperationAdmitted:
            continue
        env = envelope(sample(cls), operation_id="op1")
        for status in OpStatus:
            before = replace(base, status=status)
            try:
                after = operation_domain.evolve(before, env)
            except operation_domain.IllegalTransition:
                continue
            # The operation's status is not among them: a member's status is the batch's
            # settlement, from the terminal kinds (asked for above); the closing's words
            # come from the member view (tests/unit/batch_coordinator/test_member_view.py).
            read = ("tool", "arguments", "result", "failure", "priority", "batch_id")
            assert {f: getattr(after, f) for f in read} == {f: getattr(before, f) for f in read}
