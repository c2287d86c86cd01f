"""Limits hold under a burst, and each overflow policy behaves as declared."""

from __future__ import annotations

import asyncio
import itertools

from testkit.ops_stack import StackFactory, types


async def test_reject_policy_caps_open_operations_per_user(make_stack: StackFactory) -> None:
    stack = await make_stack()
    await stack.fault(match="cap-*", latency_ms=1500)
    ctx = stack.turn()
    turns = await asyncio.gather(
        *(
            stack.admit(stack.turn(ctx.session_id), ("capped_access", {"access": f"cap-{i}"}))
            for i in range(8)
        )
    )
    outcomes = [t.outcomes[0] for t in turns]
    admitted = [o for o in outcomes if o.status == "admitted"]
    rejected = [o for o in outcomes if o.status == "rejected"]
    assert len(admitted) == 3
    assert {o.reason for o in rejected} == {"backpressure"}
    # Another user is not affected by this user's burst.
    other = await stack.admit(stack.turn(user_id="bea"), ("capped_access", {"access": "cap-bea"}))
    assert other.outcomes[0].status == "admitted"
    for outcome in admitted:
        await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
    effects = [await stack.effects(f"cap-{i}") for i in range(8)]
    assert sum(effects) == 3


async def test_queue_policy_admits_but_runs_one_at_a_time(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=2)
    await stack.fault(match="queue-*", latency_ms=300)
    ctx = stack.turn()
    turn = await stack.admit(ctx, *(("queued_access", {"access": f"queue-{i}"}) for i in range(4)))
    statuses = [o.status for o in turn.outcomes]
    # Two open per user, and a queue as deep again: four admitted, none rejected.
    assert statuses == ["admitted"] * 4
    fifth = await stack.admit(stack.turn(ctx.session_id), ("queued_access", {"access": "queue-x"}))
    assert fifth.outcomes[0].status == "rejected"
    assert fifth.outcomes[0].reason == "backpressure"
    spans = []
    for outcome in turn.outcomes:
        await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
        _, events = await stack.operation(ctx.session_id, outcome.operation_id)
        started = next(e.occurred_at for e in events if types([e]) == ["operation.started"])
        ended = events[-1].occurred_at
        spans.append((started, ended))
    spans.sort()
    # Running limit 1: no two operations of the tool ran at the same time.
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end


async def test_coalesce_policy_joins_an_identical_open_read(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    await stack.fault(match="bistro", latency_ms=1500, times=1)
    read = {"restaurant": "bistro", "date": "2026-12-31"}
    first = await stack.admit(stack.turn(user_id="u1"), ("busy_availability", read))
    assert first.outcomes[0].status == "admitted"
    # The tenant's one slot is taken: an identical read joins it, a different one is refused.
    joined = await stack.admit(stack.turn(user_id="u2"), ("busy_availability", read))
    assert joined.outcomes[0].operation_id == first.outcomes[0].operation_id
    assert joined.outcomes[0].existing
    other = {"restaurant": "bistro", "date": "2027-01-01"}
    different = await stack.admit(stack.turn(user_id="u3"), ("busy_availability", other))
    assert different.outcomes[0].status == "rejected"
    assert different.outcomes[0].reason == "backpressure"


async def test_degrade_policy_answers_cheaply_instead_of_refusing(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    await stack.fault(match="trattoria", latency_ms=1500, times=1)
    ctx = stack.turn()
    first = await stack.admit(
        ctx, ("cheap_availability", {"restaurant": "trattoria", "date": "2026-12-31"})
    )
    second = await stack.admit(
        stack.turn(ctx.session_id),
        ("cheap_availability", {"restaurant": "trattoria", "date": "2027-01-02"}),
    )
    assert second.outcomes[0].status == "admitted"
    degraded = await stack.wait_status(ctx.session_id, second.outcomes[0].operation_id, "committed")
    assert degraded.arguments["_degraded"] is True
    assert degraded.result == {"degraded": True, "slots": []}
    full = await stack.wait_status(ctx.session_id, first.outcomes[0].operation_id, "committed")
    assert full.result is not None
    assert "slots" in full.result
    assert "degraded" not in full.result
