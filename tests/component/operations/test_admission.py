"""Bad input is rejected at admission with a recorded reason, and nothing reaches the provider."""

from __future__ import annotations

import asyncio

from testkit.ops_stack import StackFactory, types

BAD_INPUT = [
    ("launch_rockets", {"count": 1}, "unknown_tool"),
    ("provision_access", {"accesses": "github"}, "invalid_arguments"),
    ("provision_access", {}, "invalid_arguments"),
    ("provision_access", {"accesses": [f"r{i}" for i in range(21)]}, "batch_too_large"),
    ("provision_access", {"accesses": ["globex/github"]}, "forbidden"),
    (
        "book_table",
        {"restaurant": "casa", "date": "tomorrow", "time": "21:00"},
        "invalid_arguments",
    ),
    ("transfer_money", {"to_account": "bob-main", "amount_cents": -500}, "invalid_arguments"),
    ("transfer_money", {"to_account": "bob-main", "amount_cents": 900_000}, "over_limit"),
    (
        "transfer_money",
        {"to_account": "bob-main", "amount_cents": 5, "from_account": "eve-main"},
        "forbidden",
    ),
    ("revoke_access", {"access_id": "acc_1", "access": "github"}, "unknown_tool"),
]


async def test_bad_input_is_rejected_and_recorded(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    for tool, arguments, reason in BAD_INPUT:
        ctx = stack.turn()
        turn = await stack.admit(ctx, (tool, arguments))
        outcome = turn.outcomes[0]
        assert (tool, outcome.status, outcome.reason) == (tool, "rejected", reason)
        assert outcome.detail
        _, events = await stack.operation(ctx.session_id, outcome.operation_id)
        assert types(events) == ["operation.rejected"]
        assert events[0].event.reason == reason  # type: ignore[union-attr]
        assert events[0].batch_id == turn.batch_id
    await asyncio.sleep(0.3)
    # Nothing rejected ever reached the system of record.
    assert await stack.ledger() == []


async def test_own_tenant_qualifier_is_accepted(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    ctx = stack.turn(tenant_id="acme")
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["acme/wiki"]}))
    await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "committed")
    assert await stack.effects("wiki") == 1


async def test_a_batch_with_one_bad_item_admits_the_rest(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=1)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["grafana", "9lives", "loki"]}))
    statuses = [o.status for o in turn.outcomes]
    assert statuses.count("admitted") == 2
    for outcome in turn.outcomes:
        if outcome.status == "admitted":
            await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
    assert await stack.effects("grafana") == 1
    assert await stack.effects("loki") == 1
