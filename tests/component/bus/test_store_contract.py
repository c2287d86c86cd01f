"""The event-store contract of tests/unit/bus/test_store_contract.py, against `NatsEventStore`
on the real broker: the same tests, collected again here with this module's `store`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from libs.bus import (
    BUCKETS,
    EventStore,
    NatsEventStore,
    Topology,
    connect,
    ensure_buckets,
    ensure_streams,
)
from libs.config import BusSettings
from tests.unit.bus.test_store_contract import (
    test_a_batch_is_one_aggregate_over_its_kinds_and_loads_whole,
    test_a_record_is_put_once_under_its_message_id,
    test_a_second_delivery_ready_is_refused_over_every_kind_of_the_delivery,
    test_claim_once,
    test_duplicate_message_id_is_absorbed,
    test_expected_sequence_guards_the_subject,
    test_expected_sequence_is_per_subject,
    test_expected_sequence_spans_every_kind_of_one_operation,
    test_last_seq_is_the_subjects_last_message,
    test_read_returns_one_subject_in_order,
)

__all__ = [
    "test_a_batch_is_one_aggregate_over_its_kinds_and_loads_whole",
    "test_a_record_is_put_once_under_its_message_id",
    "test_a_second_delivery_ready_is_refused_over_every_kind_of_the_delivery",
    "test_claim_once",
    "test_duplicate_message_id_is_absorbed",
    "test_expected_sequence_guards_the_subject",
    "test_expected_sequence_is_per_subject",
    "test_expected_sequence_spans_every_kind_of_one_operation",
    "test_last_seq_is_the_subjects_last_message",
    "test_read_returns_one_subject_in_order",
]


@pytest.fixture(params=["nats", "plain"])
async def store(
    request: pytest.FixtureRequest, topology: Topology, bus_settings: BusSettings
) -> AsyncIterator[EventStore]:
    """`NatsEventStore` on the run's broker, every stream and bucket declared; "plain" is the
    bus over nats-py's public API only (HOLDLINE_BUS_CLIENT=plain)."""
    if request.param == "plain":
        bus_settings = replace(bus_settings, client="plain")
    nc = await connect(bus_settings, name="store-contract")
    js = nc.jetstream()
    await ensure_streams(js, topology, bus_settings)
    await ensure_buckets(js, topology, bus_settings)
    buckets = {p: await js.key_value(topology.bucket(p)) for p in BUCKETS}
    try:
        yield NatsEventStore(js, buckets)
    finally:
        for spec in topology.streams():
            await js.delete_stream(spec.name)
        for purpose in BUCKETS:
            await js.delete_key_value(topology.bucket(purpose))
        await nc.close()
