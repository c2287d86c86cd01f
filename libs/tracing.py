"""OpenTelemetry spans across services, carried through NATS message headers.

Optional and off by default. The `opentelemetry-*` packages are an extra (`otel`); when they
are missing, or when nothing turned tracing on, every function here is a no-op that adds
nothing to a message. Tracing turns on in a service process when `OTEL_EXPORTER_OTLP_ENDPOINT`
is set (spans go out over OTLP/HTTP, `service.name` = the service), or when a caller hands
`configure` its own tracer provider (tests use an in-memory exporter).

Spans: one `append <context>` (kind PRODUCER) per event appended, whose W3C `traceparent`
(and `tracestate`) travel in the message headers, and one `handle <durable>` (kind CONSUMER)
per message a durable consumer handles, a child of the appender's span. Appends made while a
handler runs are children of the handler's span, so one trace follows a turn through the
surface, the worker, the coordinator and the policy. Span attributes name subjects and ids;
traces are per request, unlike metrics, whose labels never carry a session.

A trace starts at the edge: `TracingMiddleware` opens one `<METHOD> <route>` span (kind
SERVER) per HTTP request, continuing the caller's W3C `traceparent` when it sends one, so the
appends a request makes are its children. `current_headers` is the current context as
headers: the worker's calls to the provider carry it (`libs.tools.wire`), so the provider's
request span joins the operation's trace, and it hands the context to work done later (the
provider stores it with an async completion's callback and sends it along).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    AVAILABLE = True
except ImportError:  # pragma: no cover - exercised only without the `otel` extra
    AVAILABLE = False

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"

_tracer: Tracer | None = None


def enabled() -> bool:
    """Whether spans are being recorded in this process."""
    return _tracer is not None


def configure(service: str, provider: TracerProvider | None = None) -> bool:
    """Turn tracing on for this process if asked to; return whether it is on.

    With `provider`, spans go to it. Without, tracing is on only when
    `OTEL_EXPORTER_OTLP_ENDPOINT` is set and the `otel` extra is installed.
    """
    global _tracer  # noqa: PLW0603 - one tracer per process, like the metrics registry
    if provider is None:
        endpoint = os.environ.get(ENDPOINT_VARIABLE, "")
        if not endpoint:
            return enabled()
        if not AVAILABLE:
            log.warning("%s is set but the otel extra is not installed", ENDPOINT_VARIABLE)
            return False
        provider = _otlp_provider(service)
        log.info("tracing: exporting spans over OTLP to %s", endpoint)
    _tracer = provider.get_tracer("holdline")
    return True


def disable() -> None:
    """Stop recording spans (tests)."""
    global _tracer  # noqa: PLW0603 - see configure
    _tracer = None


def _otlp_provider(service: str) -> TracerProvider:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    from opentelemetry.sdk.resources import Resource  # noqa: PLC0415
    from opentelemetry.sdk.trace import TracerProvider  # noqa: PLC0415
    from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: PLC0415

    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def _context_token(subject: str) -> str:
    # `<prefix>.<context>.<session>...`: the context names the stream, and stays bounded.
    parts = subject.split(".")
    return parts[1] if len(parts) > 1 else subject


@contextmanager
def append_span(subject: str, event_id: str) -> Iterator[dict[str, str]]:
    """A span around one append; yields the headers that carry it (empty when off)."""
    tracer = _tracer
    if tracer is None:
        yield {}
        return
    with tracer.start_as_current_span(
        f"append {_context_token(subject)}",
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.destination.name": subject,
            "messaging.message.id": event_id,
        },
    ):
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield carrier


# Entered and left for every delivery a consumer handles while tracing is off.
_NO_SPAN: AbstractContextManager[None] = nullcontext()


def handler_span(
    durable: str, subject: str, headers: Mapping[str, str] | None, event_id: str
) -> AbstractContextManager[None]:
    """A span around one consumer handler, a child of the span that appended the message."""
    if _tracer is None:
        return _NO_SPAN
    return _handler_span(_tracer, durable, subject, headers, event_id)


@contextmanager
def _handler_span(
    tracer: Tracer,
    durable: str,
    subject: str,
    headers: Mapping[str, str] | None,
    event_id: str,
) -> Iterator[None]:
    parent = propagate.extract(dict(headers or {}))
    with tracer.start_as_current_span(
        f"handle {durable}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes={
            "messaging.system": "nats",
            "messaging.consumer.group.name": durable,
            "messaging.destination.name": subject,
            "messaging.message.id": event_id,
        },
        record_exception=True,
        set_status_on_exception=True,
    ) as span:
        yield
        span.set_status(Status(StatusCode.OK))


def current_trace_id() -> str | None:
    """The active trace id as 32 hex digits, if a span is recording (logs, tests)."""
    if _tracer is None:
        return None
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


# Probes and scrapes are polled all the time; a span each would bury the requests that matter.
_UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})


class TracingMiddleware:
    """ASGI middleware: one SERVER span per HTTP request, child of the caller's `traceparent`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = _tracer
        path = str(scope.get("path", ""))
        if tracer is None or scope["type"] != "http" or path in _UNTRACED_PATHS:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        method = str(scope.get("method", "GET"))
        with tracer.start_as_current_span(
            method,
            context=propagate.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": path},
            record_exception=True,
            set_status_on_exception=True,
        ) as span:

            async def send_traced(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            try:
                await self.app(scope, receive, send_traced)
            finally:
                # The route template is known once routing ran; ids stay out of span names.
                route = getattr(scope.get("route"), "path", None)
                if route:
                    span.update_name(f"{method} {route}")
                    span.set_attribute("http.route", route)


def current_headers() -> dict[str, str]:
    """The W3C headers of the current trace context, to send it on later (empty when off)."""
    carrier: dict[str, str] = {}
    if _tracer is not None:
        propagate.inject(carrier)
    return carrier
