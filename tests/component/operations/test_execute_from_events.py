"""The worker runs operations straight from the operations stream: no work command is
written, an admitted operation's first event is the state it starts from, and every copy
of that event (a redelivery, a lost ack, a blind re-append) stays harmless."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from nats.js import JetStreamContext

from libs.bus import Context, Received, Topology
from libs.config import BusSettings, ToolSettings
from libs.domain import OpStatus
from libs.events import (
    OPERATIONS,
    OperationEvent,
    OperationStarted,
)
from libs.service import Runtime
from libs.tools import default_registry, sandbox_client
from services.operation_worker.handlers import Worker
from services.operation_worker.settings import Settings
from testkit.drained import drained
from testkit.ops_stack import OpsStack, StackFactory, types
from testkit.writer import append

WorkerFactory = Callable[[str], Worker]


# -- worker processes ----------------------------------------------------------------------
async def _work_ever_stored(stack: OpsStack) -> int:
    assert stack.js is not None
    info = await stack.js.stream_info(stack.topology.stream_name(Context.WORK))
    # A work queue forgets what was acknowledged: its last sequence counts every message.
    return int(info.state.last_seq)


async def test_admitted_and_cancelled_operations_run_without_a_work_command(
    make_stack: StackFactory,
) -> None:
    stack = await make_stack()
    ctx = stack.turn()
    turn = await stack.admit(
        ctx, ("provision_access", {"accesses": ["wq-github", "wq-jira", "wq-notion"]})
    )
    for outcome in turn.outcomes:
        state = await stack.wait_status(ctx.session_id, outcome.operation_id, "committed")
        assert state.attempts == 1
    for resource in ("wq-github", "wq-jira", "wq-notion"):
        assert await stack.effects(resource) == 1
    # A cancel while the attempt is at the provider is still answered by the worker.
    await stack.fault(match="wq-slow", latency_ms=800, times=1)
    slow = await stack.admit(
        stack.turn(ctx.session_id), ("provision_access", {"accesses": ["wq-slow"]})
    )
    op = slow.outcomes[0].operation_id
    for _ in range(200):
        running, _ = await stack.operation(ctx.session_id, op)
        if running is not None and running.status is OpStatus.RUNNING:
            break
        await asyncio.sleep(0.02)
    assert stack.admission is not None
    await stack.admission.request_cancel(ctx, op, reason="not that one")
    await stack.wait_status(ctx.session_id, op, "committed")
    # Every event handled (the refusal is appended after the commit it answers).
    assert stack.js is not None
    await drained(stack.js, stack.topology)
    _, events = await stack.operation(ctx.session_id, op)
    kinds = types(events)
    # Sent before the cancel: it happened, and the refusal names it (never silently dropped).
    assert kinds.index("operation.cancel_requested") < kinds.index("operation.cancel_refused")
    assert kinds.count("operation.committed") == 1
    assert await stack.effects("wq-slow") == 1
    assert await _work_ever_stored(stack) == 0


# -- in-process workers --------------------------------------------------------------------
@pytest.fixture
async def plane(
    make_stack: StackFactory, bus_settings: BusSettings
) -> AsyncIterator[tuple[OpsStack, WorkerFactory]]:
    """A sandbox provider and admission, no worker processes, and in-process workers."""
    stack = await make_stack(workers=0)
    assert stack.js is not None
    js = stack.js
    kv = await js.key_value(stack.topology.bucket("leases"))
    tools = ToolSettings(modules=("testkit.tools_plugin",), provider_url=stack.provider_url)
    client = sandbox_client(tools)

    def worker(name: str) -> Worker:
        runtime = Runtime(name="operation-worker", settings=bus_settings, publishes=())
        runtime.js = js
        runtime.buckets["leases"] = kv
        settings = replace(
            Settings.from_env(),
            bus=bus_settings,
            worker_id=name,
            lease_ttl_s=1.0,
            poll_interval_s=0.05,
            tools=tools,
        )
        return Worker(runtime, default_registry(client, tools), settings)

    yield stack, worker
    await client.aclose()


async def _delivered(
    js: JetStreamContext, topology: Topology, seq: int, num_delivered: int = 1
) -> Received[OperationEvent]:
    """A stored operation event as the consumer hands it over (its stored headers too)."""
    raw = await js.get_msg(topology.stream_name(Context.OPERATIONS), seq)
    assert raw.data is not None
    assert raw.subject is not None
    return Received(
        envelope=OPERATIONS.decode(raw.data),
        subject=raw.subject,
        stream_seq=seq,
        num_delivered=num_delivered,
        headers=dict(raw.headers or {}),
    )


def _counting_loads(worker: Worker) -> list[str]:
    loads: list[str] = []
    real = worker.history.load

    async def load(session_id: str, operation_id: str) -> Any:
        loads.append(operation_id)
        return await real(session_id, operation_id)

    worker.history.load = load  # type: ignore[method-assign]
    return loads


async def _admitted_seq(stack: OpsStack, session_id: str, op: str) -> int:
    assert stack.js is not None
    raw = await stack.js.get_last_msg(
        stack.topology.stream_name(Context.OPERATIONS),
        stack.topology.operation_event_subject(session_id, op, "admitted"),
    )
    assert raw.seq is not None
    return int(raw.seq)


async def test_an_admitted_delivery_runs_from_its_own_event_and_its_copies_change_nothing(
    plane: tuple[OpsStack, WorkerFactory],
) -> None:
    stack, worker = plane
    assert stack.js is not None
    resource = f"seed-{uuid.uuid4().hex[:8]}"
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("lenient_access", {"access": resource}))
    op = turn.outcomes[0].operation_id
    seq = await _admitted_seq(stack, ctx.session_id, op)
    first = worker("wa")
    loads = _counting_loads(first)
    await first.execute(await _delivered(stack.js, stack.topology, seq))
    state, events = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status is OpStatus.COMMITTED
    # Nothing read before the first append: the delivered event was the state.
    assert loads == []
    assert await stack.effects(resource) == 1
    written = len(events)

    # The same delivery again (a broker that lost the ack sends it as a first delivery), and
    # a redelivery, by this worker and by another once the lease ran out: no second effect.
    await first.execute(await _delivered(stack.js, stack.topology, seq))
    await asyncio.sleep(1.1)
    other = worker("wb")
    await other.execute(await _delivered(stack.js, stack.topology, seq))
    await other.execute(await _delivered(stack.js, stack.topology, seq, num_delivered=2))
    assert await stack.effects(resource) == 1
    state, events = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status is OpStatus.COMMITTED
    assert state.attempts == 1
    assert len(events) == written


async def test_an_admitted_event_appended_blindly_after_the_commit_is_no_seed(
    plane: tuple[OpsStack, WorkerFactory],
) -> None:
    stack, worker = plane
    assert stack.js is not None
    resource = f"blind-{uuid.uuid4().hex[:8]}"
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("lenient_access", {"access": resource}))
    op = turn.outcomes[0].operation_id
    first = worker("wa")
    await first.execute(
        await _delivered(stack.js, stack.topology, await _admitted_seq(stack, ctx.session_id, op))
    )
    assert await stack.effects(resource) == 1
    # A replayed producer re-appends the admitted event, unguarded: it is the operation's
    # last event, so a seed from it would pass the append's check and send it again.
    _, events = await stack.operation(ctx.session_id, op)
    copy = msgspec.structs.replace(events[0], event_id=f"copy-{events[0].event_id}")
    subject = stack.topology.operation_subject(ctx.session_id, op)
    stored = await append(stack.js, OPERATIONS, subject, copy)
    await asyncio.sleep(1.1)
    second = worker("wb")
    loads = _counting_loads(second)
    await second.execute(await _delivered(stack.js, stack.topology, stored.seq))
    assert loads == [op]
    assert await stack.effects(resource) == 1
    state, after = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status is OpStatus.COMMITTED
    assert not any(isinstance(e.event, OperationStarted) for e in after[len(events) :])


async def test_a_cancel_written_before_the_seeded_start_is_what_the_worker_acts_on(
    plane: tuple[OpsStack, WorkerFactory],
) -> None:
    stack, worker = plane
    assert stack.js is not None
    assert stack.admission is not None
    resource = f"late-{uuid.uuid4().hex[:8]}"
    ctx = stack.turn()
    turn = await stack.admit(ctx, ("lenient_access", {"access": resource}))
    op = turn.outcomes[0].operation_id
    seq = await _admitted_seq(stack, ctx.session_id, op)
    # The cancel lands between the admitted event's delivery and the worker's first append.
    await stack.admission.request_cancel(ctx, op, reason="changed my mind")
    await worker("wa").execute(await _delivered(stack.js, stack.topology, seq))
    state, events = await stack.operation(ctx.session_id, op)
    assert state is not None
    assert state.status is OpStatus.CANCELLED
    assert "operation.started" not in types(events)
    assert await stack.ledger(resource) == []
