"""Consumers are built from their services' declarations, each bound to exactly one handler
before anything starts; a runtime runs what it is given (libs/roles.py, libs/consumers.py)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from nats.js import JetStreamContext

from libs.bus import Context, Received
from libs.bus.topology import Partition
from libs.config import BusSettings
from libs.consumers import Bound, Consumers, UnboundConsumer
from libs.events import BATCHES, BatchOpened, OperationAdmitted, SessionOpened
from libs.roles import ConsumerDeclaration, Grouping, Publication, published_contexts
from libs.service import Runtime
from services.batch_coordinator import consumers as coordinator
from services.operation_worker import consumers as worker

pytestmark = pytest.mark.fast


async def _handle(_received: Received[Any]) -> None:
    return None


def _runtime(name: str) -> Runtime:
    runtime = Runtime(name=name, settings=BusSettings(prefix="fast"), publishes=())
    # Building a consumer reaches no broker: a stand-in connection is enough.
    runtime.js = cast(JetStreamContext, object())
    return runtime


def test_every_declaration_needs_exactly_one_handler() -> None:
    handlers = {worker.DISPATCH.role: _handle}
    with pytest.raises(UnboundConsumer, match="without a handler: \\['work'\\]"):
        Consumers(worker.CONSUMERS, handlers)
    with pytest.raises(UnboundConsumer, match="not declared: \\['relay'\\]"):
        Consumers(worker.CONSUMERS, {**handlers, "work": _handle, "relay": _handle})
    with pytest.raises(UnboundConsumer, match="declared twice: \\['work'\\]"):
        Consumers((*worker.CONSUMERS, worker.WORK), {"dispatch": _handle, "work": _handle})


def test_a_partitioned_consumer_needs_the_partition() -> None:
    handlers = {coordinator.OPERATIONS.role: _handle, coordinator.BATCHES.role: _handle}
    with pytest.raises(UnboundConsumer, match="partition"):
        Consumers(coordinator.CONSUMERS, handlers)


def test_durables_are_built_as_declared() -> None:
    runtime = _runtime("operation-worker")
    consumers = Consumers(
        worker.CONSUMERS,
        {"dispatch": Bound(_handle, max_in_flight=3, batch=2), "work": _handle},
    )
    dispatch, work = consumers.build(runtime)
    assert dispatch.spec.durable == "operation-worker-dispatch"
    assert dispatch.spec.stream == "FAST_OPERATIONS"
    assert dispatch.spec.filter_subjects == (
        "fast.operations.*.*.admitted",
        "fast.operations.*.*.cancel_requested",
    )
    assert dispatch._max_in_flight == 3
    assert dispatch._batch == 2
    assert dispatch._group_key("fast.operations.s1.op1.admitted") == "fast.operations.s1.op1"
    assert work.spec.durable == "operation-worker-work"
    assert work.spec.filter_subjects == ("fast.work.>",)
    assert work._group_key("fast.work.s1.op1") == "fast.work.s1.op1"


def test_partitioned_durables_carry_the_partition() -> None:
    runtime = _runtime("batch-coordinator")
    consumers = Consumers(
        coordinator.CONSUMERS,
        {"operations": _handle, "batches": _handle},
        partition=Partition(index=1, count=2),
    )
    operations, batches = consumers.build(runtime)
    assert operations.spec.durable == "batch-coordinator-operations-p1"
    assert batches.spec.durable == "batch-coordinator-batches-p1"
    assert batches.spec.filter_subjects == ("fast.batches.*.*.opened",)
    # Grouped by session, the consumer's default.
    assert batches._group_key("fast.batches.s1.b1.opened") == "s1"


def test_another_services_declarations_are_refused() -> None:
    consumers = Consumers(worker.CONSUMERS, {"dispatch": _handle, "work": _handle})
    with pytest.raises(UnboundConsumer, match="given to delivery-policy"):
        consumers.build(_runtime("delivery-policy"))


def test_kinds_only_of_a_stream_addressed_by_kind() -> None:
    with pytest.raises(ValueError, match="not addressed by kind"):
        ConsumerDeclaration("svc", "x", Context.INTERACTION, "s", kinds=(SessionOpened,))
    declared = ConsumerDeclaration(
        "svc", "x", Context.BATCHES, "s", kinds=(BatchOpened,), grouping=Grouping.SUBJECT
    )
    assert declared.codec is BATCHES


def test_a_runtime_publishes_what_its_service_declares() -> None:
    publications = (
        Publication("svc", Context.OPERATIONS, "a", only=(OperationAdmitted,)),
        Publication("svc", Context.DLQ, "b"),
        Publication("svc", Context.OPERATIONS, "c"),
    )
    assert published_contexts(publications) == (Context.OPERATIONS, Context.DLQ)
    assert published_contexts(worker.PUBLICATIONS) == (Context.OPERATIONS, Context.DLQ)

