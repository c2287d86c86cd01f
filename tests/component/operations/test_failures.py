"""Crashes, retries, timeouts and callbacks: every path ends with one effect and the truth."""

from __future__ import annotations

import asyncio
import signal

import httpx

from testkit.drained import drained
from testkit.ops_stack import StackFactory, attempts, types
from testkit.surface import eventually


async def test_worker_killed_after_provider_commit_before_event(make_stack: StackFactory) -> None:
    stack = await make_stack(workers=0)
    doomed = await stack.add_worker(env={"HOLDLINE_CRASH_POINTS": "worker.after_provider_commit"})
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["jenkins"]}))
    op = turn.outcomes[0].operation_id
    assert doomed.proc is not None
    await asyncio.to_thread(doomed.proc.wait, 15)
    assert doomed.proc.returncode == -signal.SIGKILL
    # The provider committed, but no event says so yet.
    state, _ = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status.value == "running"
    assert await stack.effects("jenkins") == 1
    await stack.add_worker(callback=True)
    state = await stack.wait_status(ctx.session_id, op, "committed")
    assert await stack.effects("jenkins") == 1
    _, events = await stack.operation(ctx.session_id, op)
    # The resend carried the same idempotency key: the provider replayed its stored answer.
    assert types(events).count("operation.started") == 2
    assert state.result is not None
    assert state.result["resource"] == "jenkins"


async def test_non_idempotent_transfer_killed_after_commit_is_reconciled_not_resent(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=0, provider_env={"SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY": "1"})
    doomed = await stack.add_worker(env={"HOLDLINE_CRASH_POINTS": "worker.after_provider_commit"})
    ctx = stack.turn()
    turn = await stack.admit(
        ctx, ("transfer_money", {"to_account": "bob-main", "amount_cents": 4200})
    )
    op = turn.outcomes[0]
    assert op.status == "awaiting_confirmation"
    assert stack.admission is not None
    confirmed = await stack.admission.confirm(ctx, op.operation_id, accept=True)
    assert confirmed.status == "admitted"
    assert doomed.proc is not None
    await asyncio.to_thread(doomed.proc.wait, 15)
    await stack.add_worker(callback=True)
    state = await stack.wait_status(ctx.session_id, op.operation_id, "committed")
    _, events = await stack.operation(ctx.session_id, op.operation_id)
    kinds = types(events)
    assert kinds.index("operation.unknown") < kinds.index("operation.committed")
    assert kinds.count("operation.started") == 1
    assert events[-1].event.via == "reconcile"  # type: ignore[union-attr]
    assert await stack.effects("BOB-MAIN") + await stack.effects("bob-main") == 1
    assert state.provider_ref


async def test_timeout_after_commit_on_transfer_ends_committed_via_reconcile(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(provider_env={"SANDBOX_TRANSFERS_IGNORE_IDEMPOTENCY": "1"})
    await stack.fault(match="carol-*", timeout_after_commit=True, times=1)
    ctx = stack.turn()
    turn = await stack.admit(
        ctx, ("transfer_money", {"to_account": "carol-main", "amount_cents": 1000})
    )
    assert stack.admission is not None
    await stack.admission.confirm(ctx, turn.outcomes[0].operation_id, accept=True)
    state = await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "committed")
    _, events = await stack.operation(ctx.session_id, turn.outcomes[0].operation_id)
    kinds = types(events)
    assert "operation.unknown" in kinds
    assert kinds.count("operation.started") == 1
    attempted = [e.event for e in events if types([e]) == ["operation.attempted"]]
    assert attempted[0].outcome == "timeout_after_send"  # type: ignore[union-attr]
    assert await stack.effects("carol-main") == 1
    assert state.result is not None


async def test_server_errors_then_success_commit_once(make_stack: StackFactory) -> None:
    stack = await make_stack()
    await stack.fault(match="sentry", status=503, times=2)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["sentry"]}))
    state = await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "committed")
    assert state.attempts == 3
    _, events = await stack.operation(ctx.session_id, turn.outcomes[0].operation_id)
    assert types(events).count("operation.retry_scheduled") == 2
    assert await stack.effects("sentry") == 1


async def test_retry_after_is_honoured(make_stack: StackFactory) -> None:
    stack = await make_stack()
    await stack.fault(match="datadog", status=429, retry_after_s=1, times=1)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["datadog"]}))
    await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "committed")
    _, events = await stack.operation(ctx.session_id, turn.outcomes[0].operation_id)
    tried = attempts(events)
    assert [t.outcome for t in tried] == ["rate_limited", "success"]
    assert types([tried[1].env]) == ["operation.committed"]
    gap = (tried[1].env.occurred_at - tried[0].env.occurred_at).total_seconds()
    assert gap >= 1.0


async def test_deadline_ends_a_failing_operation_in_failed_final(make_stack: StackFactory) -> None:
    # A generous retry budget, so that only the deadline can stop the retries.
    stack = await make_stack(
        worker_env={"HOLDLINE_RETRY_BUDGET_MIN": "1000", "HOLDLINE_BACKOFF_SCALE": "1"}
    )
    await stack.fault(match="unlucky", status=503)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("flaky_access", {"access": "unlucky"}))
    state = await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "failed_final")
    assert state.failure is not None
    assert state.failure.startswith("deadline")
    assert state.deadline_at is not None
    _, events = await stack.operation(ctx.session_id, turn.outcomes[0].operation_id)
    # No attempt starts after the deadline.
    last_start = [e for e in events if types([e]) == ["operation.started"]][-1]
    assert last_start.occurred_at <= state.deadline_at
    assert await stack.effects("unlucky") == 0


async def test_retry_budget_stops_a_retry_storm(make_stack: StackFactory) -> None:
    stack = await make_stack(
        workers=1, worker_env={"HOLDLINE_RETRY_BUDGET_RATIO": "0", "HOLDLINE_RETRY_BUDGET_MIN": "3"}
    )
    await stack.fault(match="storm", status=500)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("lenient_access", {"access": "storm"}))
    state = await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "failed_final")
    assert state.failure is not None
    assert state.failure.startswith("retry_budget_exhausted")
    # Three retries from the budget, plus the first attempt: four tries in all.
    assert state.attempts == 4
    assert await stack.effects("storm") == 0


async def test_business_error_fails_final_without_retry_and_dead_letters(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    await stack.fault(match="legacy", status=400, times=1)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["legacy"]}))
    state = await stack.wait_status(ctx.session_id, turn.outcomes[0].operation_id, "failed_final")
    assert state.attempts == 1
    assert state.failure is not None
    assert state.failure.startswith("business_error")
    assert stack.js is not None
    from libs.bus import DEAD_LETTER_DECODER, Context  # noqa: PLC0415

    for _ in range(50):
        info = await stack.js.stream_info(stack.topology.stream_name(Context.DLQ))
        if info.state.messages:
            break
        await asyncio.sleep(0.05)
    raw = await stack.js.get_msg(stack.topology.stream_name(Context.DLQ), info.state.first_seq)
    letter = DEAD_LETTER_DECODER.decode(raw.data or b"")
    # The letter holds the operation's whole history: it names the operation's subjects.
    assert letter.source_subject == stack.topology.operation_subject(
        ctx.session_id, turn.outcomes[0].operation_id
    )
    assert b"operation.attempted" in letter.payload


async def test_async_completion_with_a_duplicated_callback_commits_once(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(worker_env={"HOLDLINE_SANDBOX_CALLBACK_TWICE": "1"})
    ctx = stack.turn()
    turn = await stack.admit(
        ctx,
        (
            "book_table",
            {"restaurant": "Casa Pepe", "date": "2026-12-24", "time": "21:00", "party_size": 2},
        ),
    )
    op = turn.outcomes[0].operation_id
    state = await stack.wait_status(ctx.session_id, op, "committed")

    async def both_callbacks() -> bool:
        return await _callbacks_delivered(stack.provider_url) >= 2

    # The second callback has been answered by the worker (which records what it learns
    # before answering), and everything it led to on the streams is handled.
    await eventually(both_callbacks)
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    _, events = await stack.operation(ctx.session_id, op)
    kinds = types(events)
    assert kinds.count("operation.committed") == 1
    assert events[-1].event.via == "callback"  # type: ignore[union-attr]
    attempted = [e.event for e in events if types([e]) == ["operation.attempted"]]
    assert attempted[0].outcome == "accepted_async"  # type: ignore[union-attr]
    assert state.provider_ref
    assert await stack.effects("casa-pepe") == 1


async def test_a_long_async_operation_reports_progress_once_then_commits(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(
        worker_env={"HOLDLINE_PROGRESS_AFTER_S": "0.3"},
        provider_env={"SANDBOX_ASYNC_DELAY_MS": "1500"},
    )
    ctx = stack.turn()
    turn = await stack.admit(
        ctx, ("book_table", {"restaurant": "el-bulli", "date": "2026-12-31", "time": "22:00"})
    )
    op = turn.outcomes[0].operation_id
    await stack.wait_status(ctx.session_id, op, "committed")
    _, events = await stack.operation(ctx.session_id, op)
    kinds = types(events)
    assert kinds.count("operation.progress") == 1
    assert (
        kinds.index("operation.attempted")
        < kinds.index("operation.progress")
        < kinds.index("operation.committed")
    )
    progress = events[kinds.index("operation.progress")].event
    assert progress.is_final is False  # type: ignore[union-attr]
    assert await stack.effects("el-bulli") == 1


async def test_a_worker_killed_mid_attempt_is_taken_over_within_seconds_at_default_timings(
    make_stack: StackFactory,
) -> None:
    # Default ack wait and lease (nothing shortened): the surviving worker takes the
    # operation over once the dead one's lease expires, long before a 30 s timeout would.
    defaults = {"HOLDLINE_ACK_WAIT_S": "", "HOLDLINE_LEASE_TTL_S": ""}
    stack = await make_stack(workers=0)
    for i in range(2):
        await stack.add_worker(callback=i == 0, env=defaults)
    await stack.fault(match="nexus", latency_ms=1500, times=1)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["nexus"]}))
    op = turn.outcomes[0].operation_id
    await stack.wait_status(ctx.session_id, op, "running")
    _, events = await stack.operation(ctx.session_id, op)
    holder = next(e.event.worker_id for e in events  # type: ignore[union-attr]
                  if types([e]) == ["operation.started"])
    killed_at = asyncio.get_running_loop().time()
    stack.workers[int(holder.removeprefix("w"))].kill9()
    state = await stack.wait_status(ctx.session_id, op, "committed", timeout_s=30)
    assert asyncio.get_running_loop().time() - killed_at < 1.5 + 10
    assert state.status.value == "committed"
    assert await stack.effects("nexus") == 1


async def _callbacks_delivered(provider_url: str) -> float:
    """Completion callbacks the provider has had answered so far."""
    async with httpx.AsyncClient(base_url=provider_url) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith('holdline_sandbox_callbacks_total{outcome="delivered"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
