"""OpenTelemetry spans cross services through NATS headers: one trace from append to handler.

Two connections to the real broker play two services: one appends, the other consumes with
a durable consumer and appends again from its handler. The spans (collected in memory) form
one trace: append (producer) → handle (consumer) → append made by the handler.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from libs import tracing
from libs.bus import Context, DurableConsumer, Received, Topology, connect, spec_for
from libs.config import BusSettings
from libs.events import OPERATIONS, OperationAdmitted, OperationEvent, OperationStarted
from testkit.events import envelope
from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, eventually, open_chat, unique
from testkit.writer import append
from tests.system.observability.otlp import OtlpReceiver, ReceivedSpan


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


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    """Where the service processes export their spans over OTLP/HTTP."""
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.close()


@pytest.fixture
def traced_stack(
    broker: Broker, otlp: OtlpReceiver, tmp_path: Path
) -> Iterator[SurfaceStack]:
    """Every service as a process, each exporting its spans to the test's receiver."""
    running = SurfaceStack(
        nats_url=broker.url,
        prefix=f"tr{uuid.uuid4().hex[:10]}",
        logs=tmp_path,
        env={tracing.ENDPOINT_VARIABLE: otlp.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100"},
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def _handled_by(found: list[ReceivedSpan], service: str) -> list[ReceivedSpan]:
    return [s for s in found if s.service == service and s.kind == "SPAN_KIND_CONSUMER"]


_HANDLERS = {"operation-worker", "batch-coordinator", "delivery-policy", "interaction-surface"}


async def _traced_turn(chat: Chat, text: str) -> tuple[str, str, dict[str, Any]]:
    """One turn sent inside the client's own span; waits for the batch's delivered closing.

    Returns the trace id, the client's span id and the final delivery.
    """
    trace_id, client_span = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    response = await chat.client.post(
        f"/v1/sessions/{chat.session_id}/turns",
        json={"text": text},
        headers={**chat.auth, "traceparent": f"00-{trace_id}-{client_span}-01"},
    )
    assert response.status_code == 200, response.text
    [operation] = response.json()["operations"]
    assert operation["status"] == "admitted"

    async def delivered() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        finals = [
            d for d in snap["deliveries"]
            if d["kind"] == "final" and d["batch_id"] == operation["batch_id"]
        ]
        return finals[0] if finals and finals[0]["status"] == "delivered" else None

    return trace_id, client_span, await eventually(delivered, timeout_s=30)


def _orphans(found: list[ReceivedSpan], client_span: str) -> list[ReceivedSpan]:
    """Spans whose parent is neither a received span nor the client's own span."""
    ids = {s.span_id for s in found}
    return [s for s in found if s.parent_span_id not in ids and s.parent_span_id != client_span]


async def _exported(
    otlp: OtlpReceiver, trace_id: str, client_span: str, delivery_id: str, callback: bool
) -> list[ReceivedSpan]:
    """The trace once every hop exported its spans, down to the surface handling the delivery
    (and the worker's callback route, if asked).

    Each process exports in batches on its own schedule, so a handler's span can arrive
    before the append span (another process's) it continues: the wait lasts until every
    received span's parent has arrived too. A parent that never comes fails the wait.
    """

    async def complete() -> list[ReceivedSpan] | None:
        found = otlp.trace(trace_id)
        handlers = {s.service for s in found if s.kind == "SPAN_KIND_CONSUMER"}
        provider = [s for s in found if s.service == "sandbox-provider"]
        callbacks = [s for s in found if s.name == "POST /v1/callbacks/{executor}"]
        done = handlers >= _HANDLERS and provider and (callbacks or not callback)
        done = done and _delivery_handled(found, delivery_id)
        return found if done and not _orphans(found, client_span) else None

    try:
        return await eventually(complete, timeout_s=20)
    except AssertionError:
        found = otlp.trace(trace_id)
        raise AssertionError(
            f"trace {trace_id} incomplete after 20 s; spans without their parent: "
            f"{_orphans(found, client_span)}; all: {[(s.service, s.name) for s in found]}"
        ) from None


async def _assert_delivery_events_carry(
    stack: SurfaceStack, session_id: str, delivery_id: str, trace_id: str
) -> None:
    """The stored events of the delivery carry the trace in their headers."""
    settings = BusSettings(nats_url=stack.nats_url, prefix=stack.prefix)
    topo = Topology(stack.prefix)
    nc = await connect(settings, name="trace-check")
    try:
        js = nc.jetstream()
        sub = await js.pull_subscribe(
            topo.delivery_subject(session_id, delivery_id),
            stream=topo.stream_name(Context.DELIVERIES),
        )
        msgs = await sub.fetch(20, timeout=2.0)
        kinds = [json.loads(m.data)["event"]["type"] for m in msgs]
        assert "delivery.ready" in kinds
        assert "delivery.sent" in kinds
        for msg in msgs:
            assert msg.headers is not None
            assert msg.headers["traceparent"].split("-")[1] == trace_id
        await sub.unsubscribe()
    finally:
        await nc.close()


def _delivery_handled(found: list[ReceivedSpan], delivery_id: str) -> bool:
    """Whether the surface's span handling this delivery is among the spans."""
    # `<prefix>.deliveries.<session>.<delivery>.<kind>`: the delivery is the fourth token.
    return any(
        str(s.attributes.get("messaging.destination.name", "")).split(".")[3:4] == [delivery_id]
        for s in _handled_by(found, "interaction-surface")
    )


def _assert_one_tree(
    found: list[ReceivedSpan], client_span: str, delivery_id: str
) -> dict[str, ReceivedSpan]:
    """Request span → admission appends → … → the surface handling the delivery, one tree."""
    by_id = {s.span_id: s for s in found}
    # The request span: a SERVER span on the route template, child of the client's span.
    [request] = [
        s for s in found
        if s.service == "interaction-surface" and s.kind == "SPAN_KIND_SERVER"
    ]
    assert request.parent_span_id == client_span
    assert request.name == "POST /v1/sessions/{session_id}/turns"
    assert request.attributes["http.response.status_code"] == 200
    # Admission's appends are the request span's children.
    assert [
        s for s in found
        if s.name == "append operations" and s.parent_span_id == request.span_id
    ], [s.name for s in found]
    assert _handled_by(found, "batch-coordinator")
    assert _handled_by(found, "delivery-policy")
    # The surface handled the delivery it then sent.
    assert _delivery_handled(found, delivery_id)
    # Each span's parent is in the trace too: one tree rooted at the client's span.
    for span in found:
        assert span.parent_span_id in by_id or span.parent_span_id == client_span, span
    return by_id


@pytest.mark.timeout(120)
async def test_one_trace_runs_from_the_http_request_to_the_delivery(
    traced_stack: SurfaceStack, otlp: OtlpReceiver
) -> None:
    async with httpx.AsyncClient(base_url=traced_stack.url, timeout=15.0) as client:
        chat = await open_chat(client)
        # A synchronous provider call.
        trace_id, client_span, final = await _traced_turn(
            chat, f"give me access to {unique('wiki')}"
        )
        found = await _exported(
            otlp, trace_id, client_span, final["delivery_id"], callback=False
        )
        by_id = _assert_one_tree(found, client_span, final["delivery_id"])
        # The provider's request spans (more than one if a slow attempt was retried) continue
        # the worker's handler span.
        calls = [s for s in found if s.service == "sandbox-provider"]
        assert "POST /v1/accesses" in {c.name for c in calls}
        for call in calls:
            assert call.kind == "SPAN_KIND_SERVER"
            assert by_id[call.parent_span_id].service == "operation-worker"
        await _assert_delivery_events_carry(
            traced_stack, chat.session_id, final["delivery_id"], trace_id
        )

        # An asynchronous one: the provider's callback to the worker carries the trace on.
        trace_id, client_span, final = await _traced_turn(
            chat, "book a table at Casa Pepe tomorrow at 21:00"
        )
        found = await _exported(
            otlp, trace_id, client_span, final["delivery_id"], callback=True
        )
        by_id = _assert_one_tree(found, client_span, final["delivery_id"])
        bookings = {s.span_id: s for s in found if s.name == "POST /v1/bookings"}
        assert bookings
        assert {by_id[b.parent_span_id].service for b in bookings.values()} == {
            "operation-worker"
        }
        callbacks = [s for s in found if s.name == "POST /v1/callbacks/{executor}"]
        assert {c.service for c in callbacks} == {"operation-worker"}
        # The callback continues the provider request that accepted the booking, and the
        # commit it appended is its child.
        assert {c.parent_span_id for c in callbacks} <= set(bookings)
        assert [
            s for s in found
            if s.name == "append operations" and s.parent_span_id in {c.span_id for c in callbacks}
        ]
        await _assert_delivery_events_carry(
            traced_stack, chat.session_id, final["delivery_id"], trace_id
        )
