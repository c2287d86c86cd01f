"""The per-operation lease: taken over once expired, left to run out once the operation is
terminal, released at once when the operation is left unfinished.

`acquire` runs against a real KV bucket with a manual clock; the worker runs in this process
(against the test's broker and sandbox provider) so each exit path is driven on purpose.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Literal

import httpx
import pytest
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from libs.bus import Poison, Received, Topology
from libs.clock import ManualClock
from libs.config import BusSettings, ToolSettings
from libs.events import WORK, CancelOperation, Envelope, ExecuteOperation, WorkCommand
from libs.service import Runtime
from libs.tools import default_registry, sandbox_client
from services.operation_worker.handlers import Worker
from services.operation_worker.lease import acquire
from services.operation_worker.settings import Settings
from testkit.drained import drained
from testkit.ops_stack import OpsStack, StackFactory
from testkit.writer import append

TTL_S = 2.0

KeyState = Literal["absent", "released", "held"]


async def _state(kv: KeyValue, key: str) -> KeyState:
    """Whether a lease key was never written, was released (a delete marker), or holds a value."""
    try:
        await kv.get(key)
    except KeyNotFoundError as gone:
        return "absent" if gone.entry is None else "released"
    return "held"


async def _holder(kv: KeyValue, key: str) -> tuple[str, float, int]:
    """Who the key names, the wall-clock expiry it names, and its revision."""
    entry = await kv.get(key)
    holder, _, expires = (entry.value or b"").decode().partition("|")
    assert entry.revision is not None
    return holder, float(expires), entry.revision


# -- acquire -------------------------------------------------------------------------------
@pytest.fixture
async def leases(js: JetStreamContext, topology: Topology) -> KeyValue:
    return await js.key_value(topology.bucket("leases"))


async def test_a_free_key_is_taken_and_a_live_foreign_lease_is_not(leases: KeyValue) -> None:
    clock = ManualClock()
    mine = await acquire(leases, "op1", "w1", TTL_S, clock)
    assert mine is not None
    assert await acquire(leases, "op1", "w2", TTL_S, clock) is None
    # Its own lease, unexpired, is taken again (a redelivery to the same worker).
    assert await acquire(leases, "op1", "w1", TTL_S, clock) is not None


async def test_a_lease_left_to_expire_is_taken_over_by_update_on_its_revision(
    leases: KeyValue,
) -> None:
    clock = ManualClock()
    assert await acquire(leases, "op1", "w1", TTL_S, clock) is not None
    _, _, left_at = await _holder(leases, "op1")
    clock.advance(TTL_S - 0.1)
    assert await acquire(leases, "op1", "w2", TTL_S, clock) is None
    clock.advance(0.2)
    taken = await acquire(leases, "op1", "w2", TTL_S, clock)
    assert taken is not None
    holder, expires, revision = await _holder(leases, "op1")
    assert holder == "w2"
    assert expires == pytest.approx(clock.now().timestamp() + TTL_S, abs=0.001)
    assert revision > left_at
    # The new holder renews from the revision it took over; the old one cannot.
    assert await taken.renew()


async def test_a_value_naming_a_past_expiry_is_free(leases: KeyValue) -> None:
    clock = ManualClock()
    past = clock.now().timestamp() - 0.5
    await leases.put("op1", f"w1|{past:.3f}".encode())
    assert await acquire(leases, "op1", "w2", TTL_S, clock) is not None
    assert (await _holder(leases, "op1"))[0] == "w2"


async def test_a_released_lease_is_taken_again(leases: KeyValue) -> None:
    clock = ManualClock()
    first = await acquire(leases, "op1", "w1", TTL_S, clock)
    assert first is not None
    await first.release()
    assert await _state(leases, "op1") == "released"
    assert await acquire(leases, "op1", "w2", TTL_S, clock) is not None
    assert (await _holder(leases, "op1"))[0] == "w2"


# -- the worker's exits --------------------------------------------------------------------
WorkerFactory = Callable[[str], Worker]


@pytest.fixture
async def plane(
    make_stack: StackFactory, bus_settings: BusSettings
) -> AsyncIterator[tuple[OpsStack, KeyValue, WorkerFactory]]:
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
            lease_ttl_s=TTL_S,
            poll_interval_s=0.05,
            tools=tools,
        )
        return Worker(runtime, default_registry(client, tools), settings)

    yield stack, kv, worker
    await client.aclose()


def _work(
    stack: OpsStack, session_id: str, operation_id: str, command: WorkCommand
) -> Received[WorkCommand]:
    """A work message as the consumer hands it to the worker."""
    envelope: Envelope[WorkCommand] = Envelope(
        event_id=f"work-{uuid.uuid4().hex}",
        occurred_at=datetime.now(UTC),
        session_id=session_id,
        operation_id=operation_id,
        event=command,
    )
    return Received(
        envelope=envelope,
        subject=stack.topology.work_subject(session_id, operation_id),
        stream_seq=1,
        num_delivered=1,
    )


async def _admitted(stack: OpsStack, tool: str, access: str) -> tuple[str, str]:
    ctx = stack.turn()
    turn = await stack.admit(ctx, (tool, {"access": access}))
    assert [o.status for o in turn.outcomes] == ["admitted"]
    return ctx.session_id, turn.outcomes[0].operation_id


async def test_a_terminal_operation_keeps_its_lease_until_it_expires_and_copies_do_nothing(
    plane: tuple[OpsStack, KeyValue, WorkerFactory],
) -> None:
    stack, kv, worker = plane
    first, second = worker("wa"), worker("wb")
    resource = f"lease-{uuid.uuid4().hex[:8]}"
    session_id, op = await _admitted(stack, "lenient_access", resource)

    await first.work(_work(stack, session_id, op, ExecuteOperation()))
    state, _ = await stack.operation(session_id, op)
    assert state is not None
    assert state.status.value == "committed"
    assert await stack.effects(resource) == 1
    # Not deleted: it still names the worker and runs out within the ttl.
    holder, expires, revision = await _holder(kv, op)
    assert holder == "wa"
    assert 0 < expires - time.time() <= TTL_S + 0.001

    # A copy of the work while the lease is held: handled (returns, so it is acknowledged)
    # without taking the lease or touching the provider.
    await second.work(_work(stack, session_id, op, ExecuteOperation()))
    assert await _holder(kv, op) == (holder, expires, revision)
    assert await stack.effects(resource) == 1

    # After the expiry the next copy takes the lease over, finds the operation terminal and
    # lets its own lease run out too.
    wait = expires - time.time() + 0.05
    if wait > 0:
        await asyncio.sleep(wait)
    await second.work(_work(stack, session_id, op, ExecuteOperation()))
    holder, _, taken_at = await _holder(kv, op)
    assert holder == "wb"
    assert taken_at > revision
    assert await stack.effects(resource) == 1
    state, events = await stack.operation(session_id, op)
    assert state is not None
    assert state.attempts == 1
    assert [e.event.__struct_config__.tag for e in events][-1] == "operation.committed"


async def test_the_running_slot_is_released_when_the_operation_ends(
    plane: tuple[OpsStack, KeyValue, WorkerFactory],
) -> None:
    stack, kv, worker = plane
    session_id, op = await _admitted(stack, "queued_access", f"slot-{uuid.uuid4().hex[:8]}")
    await worker("wa").work(_work(stack, session_id, op, ExecuteOperation()))
    state, _ = await stack.operation(session_id, op)
    assert state is not None
    assert state.terminal
    assert await _state(kv, op) == "held"
    # Another operation of the tool waits on the slot: it is given up at once.
    assert await _state(kv, "slot.queued_access.0") == "released"


async def test_an_operation_left_unfinished_releases_its_lease(
    plane: tuple[OpsStack, KeyValue, WorkerFactory],
) -> None:
    stack, kv, worker = plane
    session_id, op = await _admitted(stack, "lenient_access", f"keep-{uuid.uuid4().hex[:8]}")
    # A cancel command for an operation still admitted: this worker stops, not terminal.
    await worker("wa").work(_work(stack, session_id, op, CancelOperation(reason="test")))
    state, _ = await stack.operation(session_id, op)
    assert state is not None
    assert not state.terminal
    assert await _state(kv, op) == "released"
    # So the next worker takes it at once, not after the ttl, and runs it.
    started = time.monotonic()
    await worker("wb").work(_work(stack, session_id, op, ExecuteOperation()))
    assert time.monotonic() - started < TTL_S
    state, _ = await stack.operation(session_id, op)
    assert state is not None
    assert state.status.value == "committed"


async def test_an_exception_releases_the_lease(
    plane: tuple[OpsStack, KeyValue, WorkerFactory], monkeypatch: pytest.MonkeyPatch
) -> None:
    stack, kv, worker = plane
    # No events for the operation: poison, raised after the lease was taken.
    with pytest.raises(Poison):
        await worker("wa").work(_work(stack, "s_none", "op_none", ExecuteOperation()))
    assert await _state(kv, "op_none") == "released"

    session_id, op = await _admitted(stack, "lenient_access", f"boom-{uuid.uuid4().hex[:8]}")
    failing = worker("wa")

    async def boom(*_: object) -> None:
        raise httpx.ConnectError("the provider vanished mid-step")

    monkeypatch.setattr(failing.steps, "step", boom)
    with pytest.raises(httpx.ConnectError):
        await failing.work(_work(stack, session_id, op, ExecuteOperation()))
    assert await _state(kv, op) == "released"


async def test_copies_of_a_committed_operations_work_are_acknowledged_with_no_second_effect(
    make_stack: StackFactory,
) -> None:
    # Two worker processes and their real work consumers: a copy is acknowledged (the
    # consumers drain) whichever worker gets it, while the lease is held and after it ran out.
    stack = await make_stack()
    assert stack.js is not None
    kv = await stack.js.key_value(stack.topology.bucket("leases"))
    resource = f"copies-{uuid.uuid4().hex[:8]}"
    session_id, op = await _admitted(stack, "lenient_access", resource)
    await stack.wait_status(session_id, op, "committed")
    holder, expires, _ = await _holder(kv, op)
    assert holder in {"w0", "w1"}
    assert expires - time.time() <= TTL_S + 0.001

    async def copy() -> None:
        assert stack.js is not None
        work = _work(stack, session_id, op, ExecuteOperation())
        await append(stack.js, WORK, work.subject, work.envelope)
        await drained(stack.js, stack.topology)

    await copy()
    assert await stack.effects(resource) == 1
    # (If the holder itself took that copy, it took its own lease again: a later expiry.)
    _, expires, _ = await _holder(kv, op)
    await asyncio.sleep(max(0.0, expires - time.time() + 0.05))
    await copy()
    assert await stack.effects(resource) == 1
    state, _ = await stack.operation(session_id, op)
    assert state is not None
    assert state.attempts == 1
    # The late copy took the expired lease and left it to run out in turn.
    assert (await _holder(kv, op))[1] > expires
