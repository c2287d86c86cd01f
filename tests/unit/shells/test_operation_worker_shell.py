"""The worker's shell on the in-memory event store: appends guarded (a lost race is `Stale`),
dead letters stored once with the operation's history, callbacks applied once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import msgspec
import pytest

from libs.bus import DEAD_LETTER_DECODER, Context, MemoryEventStore
from libs.clock import ManualClock, SequentialIds
from libs.domain import OpStatus
from libs.events import OPERATIONS, OperationAdmitted, OperationStarted
from libs.tools import CallbackResult, Lookup, default_registry, sandbox_client
from services.operation_worker.handlers import FOREIGN, Worker
from services.operation_worker.history import Op, Stale
from services.operation_worker.settings import Settings
from testkit.events import T0, envelope

from .support import offline_runtime

pytestmark = pytest.mark.fast


@pytest.fixture
async def worker() -> AsyncIterator[tuple[Worker, MemoryEventStore]]:
    store = MemoryEventStore()
    settings = replace(Settings.from_env(), worker_id="w1")
    # Executors registered (callbacks are routed by them); none is ever called here.
    client = sandbox_client(settings.tools)
    runtime = offline_runtime("operation-worker")
    registry = default_registry(client, settings.tools)
    yield (
        Worker(runtime, registry, settings, store=store, clock=ManualClock(at=T0),
               ids=SequentialIds()),
        store,
    )
    await client.aclose()


async def _admit(worker: Worker, store: MemoryEventStore, op: str) -> Op:
    env = envelope(
        OperationAdmitted(tool="provision_access", arguments={"accesses": ["wiki"]},
                          tenant_id="t", user_id="u"),
        session_id="s1", operation_id=op, intent_key=f"ik-{op}", batch_id="b1",
    )
    subject = offline_runtime("x").topology.operation_subject("s1", op)
    await store.append(OPERATIONS, subject, env, expected_last_subject_seq=0)
    loaded = await worker.history.load("s1", op)
    assert loaded is not None
    return loaded


async def test_an_append_decided_on_an_old_sequence_is_stale(
    worker: tuple[Worker, MemoryEventStore],
) -> None:
    w, store = worker
    op = await _admit(w, store, "op1")
    moved = await w.history.append(op, OperationStarted(attempt=1, worker_id="w1"))
    assert moved.state.status is OpStatus.RUNNING
    assert moved.seq > op.seq
    with pytest.raises(Stale):
        await w.history.append(op, OperationStarted(attempt=1, worker_id="w2"))


async def test_a_dead_letter_is_stored_once_with_the_history_and_marks_the_operation(
    worker: tuple[Worker, MemoryEventStore],
) -> None:
    w, store = worker
    op = await _admit(w, store, "op1")
    await w.steps.dead_letters.dead_letter(op, "unresolved: no answer")
    # A repeat (a crash before the mark, redelivered) stores no second letter.
    await w.steps.dead_letters.dead_letter(op, "unresolved: no answer")
    topology = offline_runtime("x").topology
    letters = store.records(topology.dlq_subject(Context.OPERATIONS, "s1"))
    assert len(letters) == 1
    letter = DEAD_LETTER_DECODER.decode(letters[0])
    assert letter.reason == "unresolved: no answer"
    assert letter.consumer == "operation-worker/w1"
    assert letter.source_seq == op.seq
    assert len(msgspec.json.decode(letter.payload)) == 1
    marked = await w.history.load("s1", "op1")
    assert marked is not None
    assert marked.state.dead_lettered


async def test_a_callback_is_applied_once_and_only_by_its_executor(
    worker: tuple[Worker, MemoryEventStore],
) -> None:
    w, store = worker
    op = await _admit(w, store, "op1")
    await w.history.append(op, OperationStarted(attempt=1, worker_id="w1"))
    done = CallbackResult(
        operation_id="op1", found=Lookup(state="committed", provider_ref="r1"), session_id="s1"
    )
    assert await w.complete_from_callback(done, "sandbox.booking") == FOREIGN
    assert await w.complete_from_callback(done, "sandbox") == "applied"
    assert await w.complete_from_callback(done, "sandbox") == "already_terminal"
    # A provider that echoes only our key: the session is found through the wildcard.
    unknown = CallbackResult(operation_id="op-none", found=Lookup(state="committed"))
    assert await w.complete_from_callback(unknown, "sandbox") == "unknown_operation"
    state = await w.history.load("s1", "op1")
    assert state is not None
    assert state.state.status is OpStatus.COMMITTED
