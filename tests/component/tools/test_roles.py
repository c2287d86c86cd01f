"""A user's tool whose arguments are named unlike any demo tool's gets tenant isolation,
ownership and the amount limit from its declared roles alone (real broker, worker, API)."""

from __future__ import annotations

import asyncio

from testkit.desk import DeskFactory, DeskStack
from testkit.ops_stack import types
from testkit.surface import eventually

PAYOUT = {"account_id": "ana:checking", "payee": "acme/bob", "amount": 2500, "memo": " rent "}


async def test_roles_refuse_other_tenants_other_users_and_amounts_over_the_limit(
    desk_stack: DeskFactory,
) -> None:
    stack = await desk_stack()
    ops = stack.ops
    refused = ops.turn()
    fine = ops.turn()
    bad_calls = [
        ("send_payout", {**PAYOUT, "payee": "globex/bob"}),
        ("send_payout", {**PAYOUT, "account_id": "bob:checking"}),
        ("send_payout", {**PAYOUT, "account_id": "anabel:checking"}),
        # Not a whole segment: `ana-bob` could be another user's id.
        ("send_payout", {**PAYOUT, "account_id": "ana-bob-7"}),
        ("send_payout", {**PAYOUT, "amount": 100_001}),
    ]
    # Another session of the same tenant admits at the same time and keeps flowing.
    bad, good = await asyncio.gather(
        ops.admit(refused, *bad_calls), ops.admit(fine, ("send_payout", PAYOUT))
    )
    reasons = [(o.status, o.reason) for o in bad.outcomes]
    assert reasons == [
        ("rejected", "forbidden"),
        ("rejected", "forbidden"),
        ("rejected", "forbidden"),
        ("rejected", "forbidden"),
        ("rejected", "over_limit"),
    ]
    assert "another tenant" in bad.outcomes[0].detail
    assert "account_id" in bad.outcomes[1].detail
    assert "100001" in bad.outcomes[4].detail
    assert "100000" in bad.outcomes[4].detail
    for outcome in bad.outcomes:
        state, events = await ops.operation(refused.session_id, outcome.operation_id)
        # The refusal is durable, with its reason, and nothing was ever sent.
        assert state is not None
        assert state.status.value == "rejected"
        assert types(events) == ["operation.rejected"]
    op = good.outcomes[0]
    assert op.status == "admitted"
    state = await ops.wait_status(fine.session_id, op.operation_id, "committed")
    # Normalised by role: the own tenant's qualifier is stripped, free text only trimmed.
    assert state.arguments["payee"] == "bob"
    assert state.arguments["memo"] == "rent"
    _, events = await ops.operation(fine.session_id, op.operation_id)
    # 202 first, then the example API's signed webhook at the module's own callback route.
    assert events[-1].event.via == "callback"  # type: ignore[union-attr]
    assert await stack.effects(op.operation_id) == 1
    # The refused payouts never reached the system of record.
    assert await stack.all_effects() == 1
    activity = await eventually(lambda: _webhooks(stack, "/v1/callbacks/payouts"))
    assert all(w["status"] == 200 for w in activity)


async def _webhooks(stack: DeskStack, suffix: str) -> list[dict[str, object]]:
    sent = (await stack.desk_get("/admin/activity"))["webhooks"]
    return [w for w in sent if str(w["url"]).endswith(suffix)]
