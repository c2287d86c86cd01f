"""On the real broker, the coordinator's durable holds only the kinds its member view folds,
and a member's life delivers it its end, not its admission (`batch.opened` names what the
closing says of it), its start or its attempts."""

from __future__ import annotations

from nats.js import JetStreamContext

from libs.bus import Context, Topology
from libs.events import OperationAdmitted, OperationAttempted, OperationStarted
from services.batch_coordinator.domain import COORDINATED
from services.batch_coordinator.settings import SERVICE
from testkit.surface import eventually
from tests.component.coordination.harness import Scripted, Services, assert_one_final, new_id


async def test_the_coordinator_is_delivered_only_the_kinds_its_closing_reads(
    scripted: Scripted, services: Services, js: JetStreamContext, topology: Topology
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    durable = topology.durable(SERVICE, Context.OPERATIONS.value)
    info = await js.consumer_info(stream, durable)
    assert sorted(info.config.filter_subjects or ()) == sorted(
        topology.operation_kinds_filter(COORDINATED)
    )
    left_out_kinds = (OperationAdmitted, OperationStarted, OperationAttempted)
    for left_out in topology.operation_kinds_filter(left_out_kinds):
        assert left_out not in (info.config.filter_subjects or ())
    delivered_before = info.delivered.consumer_seq

    session, batch = new_id("s"), new_id("b")
    await scripted.open_session(session)
    await scripted.open_batch(session, batch, {"op1": {}})
    await scripted.operation(session, "op1", OperationStarted(worker_id="w1", attempt=1),
                             batch_id=batch)
    await scripted.operation(session, "op1", OperationAttempted(attempt=1, outcome="success"),
                             batch_id=batch)
    await scripted.commit(session, batch, "op1")

    async def closed() -> bool:
        return any(e.batch_id == batch for e in await scripted.finals(session))

    await eventually(closed, timeout_s=15)
    await assert_one_final(scripted, session, batch)
    after = await js.consumer_info(stream, durable)
    assert after.num_pending == 0
    # operation.committed alone; the admission, the start and the attempt stay on the
    # broker (a redelivery would count too: none is due within the 2 s ack wait).
    assert after.delivered.consumer_seq - delivered_before == 1
