"""OpenTelemetry spans cross services through NATS headers: one trace from append to handler.

Two connections to the real broker play two services: one appends, the other consumes with
a durable consumer and appends again from its handler. The spans (collected in memory) form
one trace: append (producer) → handle (consumer) → append made by the handler.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from libs import tracing
from libs.bus import Context, DurableConsumer, Received, Topology, append, connect, spec_for
from libs.config import BusSettings
from libs.events import OPERATIONS, OperationAdmitted, OperationEvent, OperationStarted
from tests.support.events import envelope


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory, for this test only."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    assert tracing.configure("test", provider=provider)
    yield exporter
    tracing.disable()
    provider.shutdown()


def _admitted(session: str, op: str) -> OperationAdmitted:
    return OperationAdmitted(
        tool="provision_access", arguments={"access": op}, tenant_id="t", user_id="u"
    )


def _one(found: list[ReadableSpan], name: str, event_id: str) -> ReadableSpan:
    matching = [
        s for s in found
        if s.name == name and (s.attributes or {}).get("messaging.message.id") == event_id
    ]
    assert len(matching) == 1, [s.name for s in found]
    return matching[0]


async def test_trace_follows_an_event_from_one_service_to_another(
    js: JetStreamContext,
    topology: Topology,
    bus_settings: BusSettings,
    spans: InMemorySpanExporter,
) -> None:
    # "Service B": its own connection, a durable consumer whose handler appends again.
    other = await connect(bus_settings, name="service-b")
    handled = asyncio.Event()
    seen: list[str | None] = []

    async def handle(received: Received[OperationEvent]) -> None:
        if isinstance(received.envelope.event, OperationAdmitted):
            seen.append(tracing.current_trace_id())
            started = envelope(
                OperationStarted(worker_id="w", attempt=1),
                session_id="s1",
                operation_id="op1",
                causation_id=received.envelope.event_id,
            )
            await append(
                other.jetstream(), OPERATIONS, topology.operation_subject("s1", "op1"), started
            )
            handled.set()

    consumer = DurableConsumer(
        other.jetstream(),
        spec_for(topology, Context.OPERATIONS, durable="traced", ack_wait_s=2.0, max_deliver=3),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
    )
    task = asyncio.create_task(consumer.run())
    try:
        # "Service A": the fixture's connection appends the first event.
        subject = topology.operation_subject("s1", "op1")
        first = envelope(_admitted("s1", "op1"), session_id="s1")
        appended = await append(js, OPERATIONS, subject, first)
        await asyncio.wait_for(handled.wait(), 10)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
        await other.close()

    # The stored message carries the W3C trace context in its headers.
    stored = await js.get_msg(topology.stream_name(Context.OPERATIONS), appended.seq)
    assert stored.headers is not None
    traceparent = stored.headers["traceparent"]
    assert traceparent.startswith("00-")

    finished = list(spans.get_finished_spans())
    appends = [s for s in finished if s.name == "append operations"]
    assert len(appends) == 2
    producer, nested = sorted(appends, key=lambda s: s.start_time or 0)
    handler = _one(finished, "handle traced", first.event_id)
    assert producer.kind is SpanKind.PRODUCER
    assert handler.kind is SpanKind.CONSUMER
    assert producer.context is not None
    assert handler.context is not None
    assert nested.context is not None
    trace_id = producer.context.trace_id
    # One trace: the handler is the appender's child, the handler's append is the handler's.
    assert handler.context.trace_id == trace_id
    assert nested.context.trace_id == trace_id
    assert handler.parent is not None
    assert handler.parent.span_id == producer.context.span_id
    assert nested.parent is not None
    assert nested.parent.span_id == handler.context.span_id
    assert traceparent.split("-")[1] == format(trace_id, "032x")
    assert seen == [format(trace_id, "032x")]


async def test_tracing_is_off_by_default(
    js: JetStreamContext, topology: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(tracing.ENDPOINT_VARIABLE, raising=False)
    tracing.disable()
    assert not tracing.configure("test")
    assert not tracing.enabled()
    subject = topology.operation_subject("s1", "op2")
    appended = await append(
        js, OPERATIONS, subject, envelope(_admitted("s1", "op2"), session_id="s1")
    )
    stored = await js.get_msg(topology.stream_name(Context.OPERATIONS), appended.seq)
    assert "traceparent" not in (stored.headers or {})
    assert tracing.current_trace_id() is None


def test_an_otlp_endpoint_turns_tracing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing listens there: the batch processor exports in the background and gives up.
    monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, "http://127.0.0.1:9")
    try:
        assert tracing.configure("operation-worker")
        assert tracing.enabled()
    finally:
        tracing.disable()
