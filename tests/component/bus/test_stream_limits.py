"""Stream limits never drop an unfinished operation: a full event stream refuses the next
append and keeps every stored event; dead letters age out on their own stream only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import APIError

from demo.tools import DEMO_TOOLS
from libs.bus import Context, Topology, ensure_streams, read_subject
from libs.bus.declare import stream_config
from libs.bus.limits import StreamLimits
from libs.config import BusSettings
from libs.events import OPERATIONS, OperationAdmitted, OperationProgress
from testkit.events import envelope

LIMITS = StreamLimits(max_msgs=5, dlq_max_age_s=3600.0)


@pytest.fixture
async def limited(
    nats_client: Client, topology: Topology, bus_settings: BusSettings
) -> AsyncIterator[JetStreamContext]:
    """This test's streams declared with a five-message limit."""
    js = nats_client.jetstream()
    await ensure_streams(js, topology, bus_settings, LIMITS)
    yield js
    for spec in topology.streams():
        await js.delete_stream(spec.name)


def _event(op: str, event: Any) -> Any:
    return envelope(event, session_id="s1", operation_id=op)


async def test_a_full_operations_stream_refuses_appends_and_keeps_the_pending_operation(
    limited: JetStreamContext, topology: Topology
) -> None:
    js = limited
    tool = DEMO_TOOLS[0].name
    admitted = OperationAdmitted(
        tool=tool, arguments={"access": "wiki"}, tenant_id="t", user_id="u"
    )
    pending = topology.operation_event_subject("s1", "op-pending", "admitted")
    await js.publish(pending, OPERATIONS.encode(_event("op-pending", admitted)))
    progress = topology.operation_event_subject("s1", "op-chatty", "progress")
    refused = 0
    for i in range(20):
        try:
            await js.publish(
                progress, OPERATIONS.encode(_event("op-chatty", OperationProgress(message=f"{i}")))
            )
        except APIError:
            refused += 1
    assert refused == 16
    # The pending operation's admission, the oldest message, is still there to be worked on.
    replayed = await read_subject(
        js, topology.stream_name(Context.OPERATIONS),
        topology.operation_subject("s1", "op-pending"), OPERATIONS,
    )
    assert [type(r.envelope.event) for r in replayed.items] == [OperationAdmitted]
    info = await js.stream_info(topology.stream_name(Context.OPERATIONS))
    assert (info.state.messages, info.state.first_seq) == (5, 1)


def test_each_stream_gets_its_limit(bus_settings: BusSettings, topology: Topology) -> None:
    for spec in topology.streams():
        config = stream_config(spec, bus_settings, LIMITS)
        if spec.context is Context.DLQ:
            assert (config.discard, config.max_age, config.max_msgs) == ("old", 3600.0, -1)
        else:
            assert (config.discard, config.max_msgs, config.max_age) == ("new", 5, 0)
