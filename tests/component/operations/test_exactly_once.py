"""Effects per intent == 1, read from the provider's ledger, under duplicates and crashes."""

from __future__ import annotations

import asyncio
import signal
import uuid
from datetime import UTC, datetime

from libs.admission import Admission, LoadView, ToolCall
from libs.bus import NatsEventStore
from libs.events import OPERATIONS, WORK, Envelope, ExecuteOperation, OperationAdmitted
from libs.tools import default_registry
from testkit.drained import drained
from testkit.ops_stack import StackFactory, attempts, types
from testkit.writer import append


async def test_batch_of_accesses_commits_each_once(make_stack: StackFactory) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    turn = await stack.admit(
        ctx, ("provision_access", {"accesses": ["github", "Jira", "confluence"]})
    )
    assert turn.batch_id is not None
    assert [o.status for o in turn.outcomes] == ["admitted"] * 3
    assert {o.batch_id for o in turn.outcomes} == {turn.batch_id}
    for outcome in turn.outcomes:
        state = await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
        assert state.attempts == 1
    for resource in ("github", "jira", "confluence"):
        assert await stack.effects(resource) == 1
    _, events = await stack.operation(ctx.session_id, turn.outcomes[0].operation_id)
    assert types(events) == [
        "operation.admitted",
        "operation.started",
        "operation.committed",
    ]
    # The one try is recorded in the commit it decided, with the provider's status.
    [tried] = attempts(events)
    assert (tried.attempt, tried.outcome, tried.http_status) == (1, "success", 201)
    # Every event carries the identities that tie it to the conversation.
    assert {e.batch_id for e in events} == {turn.batch_id}
    assert {e.turn_id for e in events} == {ctx.turn_id}


async def test_same_tool_call_twice_with_different_call_ids_is_one_operation(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    same = {"accesses": ["slack"]}
    turn = await stack.admit(
        ctx,
        ToolCall("provision_access", same, "call_a"),
        ToolCall("provision_access", same, "call_b"),
    )
    first, second = turn.outcomes
    assert first.operation_id == second.operation_id
    assert second.existing
    # The model repeats itself in a later turn too: still the same operation.
    later = await stack.admit(
        stack.turn(ctx.session_id),
        ToolCall("provision_access", {"accesses": [" SLACK "]}, "call_c"),
    )
    assert later.outcomes[0].operation_id == first.operation_id
    assert later.outcomes[0].existing
    assert later.batch_id is None
    await stack.wait_status(ctx.session_id, first.operation_id, "committed")
    assert await stack.effects("slack") == 1


async def test_client_retrying_a_turn_admits_nothing_new(make_stack: StackFactory) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    calls = (("provision_access", {"accesses": ["notion", "figma"]}),)
    first = await stack.admit(ctx, *calls)
    retried = await asyncio.gather(*(stack.admit(ctx, *calls) for _ in range(3)))
    for again in retried:
        assert [o.operation_id for o in again.outcomes] == [o.operation_id for o in first.outcomes]
        assert all(o.existing for o in again.outcomes)
    for outcome in first.outcomes:
        await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
    assert await stack.effects("notion") == 1
    assert await stack.effects("figma") == 1


async def test_duplicate_admitted_event_and_duplicate_work_change_nothing(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    await stack.fault(match="gitlab", latency_ms=400, times=1)
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["gitlab"]}))
    op = turn.outcomes[0].operation_id
    assert stack.js is not None
    _, events = await stack.operation(ctx.session_id, op)
    admitted = events[0]
    assert isinstance(admitted.event, OperationAdmitted)
    # A second operation.admitted (new event id, as a buggy or replayed producer would write).
    dup = Envelope(
        **{
            **{f: getattr(admitted, f) for f in admitted.__struct_fields__},
            "event_id": "dup-" + admitted.event_id,
        }
    )
    await append(stack.js, OPERATIONS, stack.topology.operation_subject(ctx.session_id, op), dup)
    # And extra work commands for the same operation, outside any dedup window.
    for i in range(3):
        work = Envelope(
            event_id=f"extra-{i}-{uuid.uuid4().hex}",
            occurred_at=admitted.occurred_at,
            session_id=ctx.session_id,
            operation_id=op,
            event=ExecuteOperation(),
        )
        await append(stack.js, WORK, stack.topology.work_subject(ctx.session_id, op), work)
    state = await stack.wait_status(ctx.session_id, op, "committed")
    # Every duplicate handled by the workers, not just given half a second.
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    assert await stack.effects("gitlab") == 1
    _, events = await stack.operation(ctx.session_id, op)
    assert types(events).count("operation.committed") == 1
    assert state.attempts == 1


async def test_two_workers_racing_for_one_operation_make_one_effect(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=3)
    ctx = stack.turn()
    await stack.fault(match="race-*", latency_ms=300, times=5)
    turn = await stack.admit(
        ctx, ("provision_access", {"accesses": [f"race-{i}" for i in range(5)]})
    )
    assert stack.js is not None
    for outcome in turn.outcomes:
        for i in range(2):
            work = Envelope(
                event_id=f"race-{i}-{uuid.uuid4().hex}",
                occurred_at=datetime.now(UTC),
                session_id=ctx.session_id,
                operation_id=outcome.operation_id,
                event=ExecuteOperation(),
            )
            await append(
                stack.js,
                WORK,
                stack.topology.work_subject(ctx.session_id, outcome.operation_id),
                work,
            )
    for outcome in turn.outcomes:
        await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
    # Every copy of the work handled by the workers, not just given half a second.
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    for i in range(5):
        assert await stack.effects(f"race-{i}") == 1
    for outcome in turn.outcomes:
        _, events = await stack.operation(ctx.session_id, outcome.operation_id)
        assert types(events).count("operation.committed") == 1


async def test_redelivery_after_ack_wait_of_a_paused_worker_makes_one_effect(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack(workers=0)
    paused = await stack.add_worker(callback=True)
    await stack.fault(match="frozen", latency_ms=600, times=1)
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("provision_access", {"accesses": ["frozen"]}))
    op = turn.outcomes[0].operation_id
    for _ in range(100):
        state, _ = await stack.operation(ctx.session_id, op)
        if state is not None and state.status.value == "running":
            break
        await asyncio.sleep(0.02)
    assert paused.proc is not None
    # Freeze the worker mid-attempt for longer than ack_wait (2 s) and its lease.
    paused.proc.send_signal(signal.SIGSTOP)
    try:
        await stack.add_worker()
        state = await stack.wait_status(ctx.session_id, op, "committed", timeout_s=20)
    finally:
        paused.proc.send_signal(signal.SIGCONT)
    await asyncio.sleep(1.5)
    # The frozen worker wakes up, finds the operation settled, and writes nothing that lies.
    _, events = await stack.operation(ctx.session_id, op)
    assert types(events).count("operation.committed") == 1
    assert types(events).count("operation.started") == 2
    assert {e.event.worker_id for e in events if types([e]) == ["operation.started"]} == {
        "w0",
        "w1",
    }  # type: ignore[union-attr]
    assert await stack.effects("frozen") == 1
    assert state.status.value == "committed"


async def test_an_intent_maps_to_its_operation_across_an_admission_restart(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    first = await stack.admit(ctx, ("provision_access", {"accesses": ["okta"]}))
    op = first.outcomes[0].operation_id
    await stack.wait_status(ctx.session_id, op, "committed")
    # A new process: empty in-memory view, only the broker's create-once claims to go on.
    assert stack.js is not None
    fresh = Admission(
        NatsEventStore(stack.js, {}),
        stack.topology,
        default_registry(),
        LoadView(),
        await stack.js.key_value(stack.topology.bucket("intents")),
    )
    again = await fresh.admit(
        stack.turn(ctx.session_id), [ToolCall("provision_access", {"accesses": ["OKTA"]}, "call_z")]
    )
    assert again.outcomes[0].operation_id == op
    assert again.outcomes[0].existing
    assert again.outcomes[0].status == "committed"
    assert again.batch_id is None
    assert await stack.effects("okta") == 1
