"""Cancellation in each phase, and compensation as a new linked operation."""

from __future__ import annotations

import asyncio

from testkit.drained import drained
from testkit.ops_stack import StackFactory, types

# The provider completes a held booking this long after accepting it (202): only a window
# longer than that shows it never completes one that was cancelled.
ASYNC_DELAY_S = 2.0
PAST_ASYNC_DELAY_S = ASYNC_DELAY_S + 0.5
HELD = {"SANDBOX_ASYNC_DELAY_MS": str(int(ASYNC_DELAY_S * 1000))}

BOOKING = {"restaurant": "Casa Pepe", "date": "2026-12-24", "time": "21:00", "party_size": 2}


async def test_cancel_before_start_sends_nothing(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=0)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["airtable"]}))
    op = turn.outcomes[0].operation_id
    assert stack.admission is not None
    requested = await stack.admission.request_cancel(ctx, op, reason="the user changed their mind")
    assert requested.status == "cancel_requested"
    # Until a worker confirms, nobody may say "cancelled".
    state, _ = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status.value == "cancel_requested"
    await stack.add_worker(callback=True)
    state = await stack.wait_status(ctx.session_id, op, "cancelled")
    assert state.attempts == 0
    _, events = await stack.operation(ctx.session_id, op)
    assert "operation.started" not in types(events)
    assert await stack.ledger("airtable") == []


async def test_cancel_while_running_asks_the_provider_and_waits_for_its_answer(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(provider_env=HELD)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("book_table", BOOKING))
    op = turn.outcomes[0].operation_id
    # The provider accepted the booking (202) and it is pending there.
    await stack.wait_async_pending(ctx.session_id, op)
    assert stack.admission is not None
    await stack.admission.request_cancel(ctx, op, reason="don't book it")
    state = await stack.wait_status(ctx.session_id, op, "cancelled")
    _, events = await stack.operation(ctx.session_id, op)
    kinds = types(events)
    assert kinds.index("operation.cancel_requested") < kinds.index("operation.cancelled")
    assert "operation.committed" not in kinds
    # The provider's own completion would have come by now (the window outlasts its async
    # delay, counted from an acceptance that came before the cancel), and all it led to is
    # handled: it never commits the cancelled booking, and no callback resurrects it.
    await asyncio.sleep(PAST_ASYNC_DELAY_S)
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    assert await stack.effects("casa-pepe") == 0
    state, _ = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status.value == "cancelled"


async def test_cancel_after_commit_is_refused_and_offers_compensation(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["linear"]}))
    op = turn.outcomes[0].operation_id
    await stack.wait_status(ctx.session_id, op, "committed")
    assert stack.admission is not None
    refused = await stack.admission.request_cancel(ctx, op, reason="never mind")
    assert refused.status == "committed"
    assert refused.reason == "not_cancellable"
    state, events = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status.value == "committed"
    refusal = events[-1].event
    assert types([events[-1]]) == ["operation.cancel_refused"]
    assert refusal.compensating_tool == "revoke_access"  # type: ignore[union-attr]

    undo = await stack.admission.compensate(ctx, op)
    assert undo.tool == "revoke_access"
    assert undo.operation_id != op
    again = await stack.admission.compensate(ctx, op)
    assert again.operation_id == undo.operation_id
    assert again.existing
    comp = await stack.wait_status(ctx.session_id, undo.operation_id, "committed")
    assert comp.compensates == op
    original, events = await stack.operation(ctx.session_id, op)
    assert original is not None
    assert original.status.value == "committed"
    assert original.compensated_by == undo.operation_id
    assert "operation.compensated" in types(events)
    assert comp.result is not None
    assert comp.result["status"] == "revoked"
    # One grant, never repeated; the revoke reversed it at the system of record.
    assert await stack.effects("linear") == 1


async def test_confirmation_is_needed_before_a_transfer_runs(make_stack: StackFactory) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    turn = await stack.admit(
        ctx, ("transfer_money", {"to_account": "dave-main", "amount_cents": 2500})
    )
    op = turn.outcomes[0]
    assert op.status == "awaiting_confirmation"
    assert op.prompt is not None
    assert "transfer_money" in op.prompt
    # The workers have seen everything admission wrote, and sent nothing.
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    assert await stack.ledger("dave-main") == []
    assert stack.admission is not None
    declined = await stack.admission.confirm(ctx, op.operation_id, accept=False)
    assert declined.status == "rejected"
    state, _ = await stack.operation(ctx.session_id, op.operation_id)
    assert state is not None
    assert state.failure is not None
    assert state.failure.startswith("confirmation_declined")
    assert await stack.ledger("dave-main") == []


async def test_a_newer_intent_cancels_the_older_one_still_running(make_stack: StackFactory) -> None:
    stack = await make_stack(provider_env=HELD)
    ctx = stack.turn()
    first = await stack.admit(ctx, ("book_table", BOOKING))
    old = first.outcomes[0].operation_id
    await stack.wait_async_pending(ctx.session_id, old)
    second = await stack.admit(
        stack.turn(ctx.session_id), ("book_table", {**BOOKING, "time": "21:30"})
    )
    new = second.outcomes[0].operation_id
    assert new != old
    cancelled = await stack.wait_status(ctx.session_id, old, "cancelled")
    assert cancelled.result is None
    booked = await stack.wait_status(ctx.session_id, new, "committed")
    assert booked.result is not None
    assert booked.result["time"] == "21:30"
    # Past the cancelled booking's completion time at the provider, and all handled.
    await asyncio.sleep(PAST_ASYNC_DELAY_S)
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    # One real booking: the 21:00 one never happened at the restaurant.
    assert await stack.effects("casa-pepe") == 1


async def test_a_newer_intent_compensates_the_older_one_already_committed(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(provider_env={"SANDBOX_ASYNC_DELAY_MS": "100"})
    ctx = stack.turn()
    first = await stack.admit(ctx, ("book_table", BOOKING))
    old = first.outcomes[0].operation_id
    await stack.wait_status(ctx.session_id, old, "committed")
    second = await stack.admit(
        stack.turn(ctx.session_id), ("book_table", {**BOOKING, "time": "21:30"})
    )
    new = second.outcomes[0].operation_id
    await stack.wait_status(ctx.session_id, new, "committed")
    for _ in range(100):
        original, events = await stack.operation(ctx.session_id, old)
        if original is not None and original.compensated_by:
            break
        await asyncio.sleep(0.05)
    assert original is not None
    # History is not rewritten: the 21:00 booking stays committed, and is undone by a
    # linked cancel_booking operation.
    assert original.status.value == "committed"
    assert original.compensated_by is not None
    kinds = types(events)
    assert kinds.index("operation.cancel_refused") < kinds.index("operation.compensated")
    undo = await stack.wait_status(ctx.session_id, original.compensated_by, "committed")
    assert undo.tool == "cancel_booking"
    assert undo.compensates == old
    assert undo.result is not None
    assert undo.result["status"] == "cancelled"
    assert await stack.effects("casa-pepe") == 2
