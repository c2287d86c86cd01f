"""A minimal OTLP/HTTP trace receiver: service processes export real spans to the test."""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span


@dataclass(frozen=True)
class ReceivedSpan:
    """One exported span, flattened: ids as hex, kind as its OTLP name."""

    service: str
    name: str
    kind: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]


class OtlpReceiver:
    """Accepts `POST /v1/traces` (protobuf) on 127.0.0.1 and keeps every span."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                receiver.add(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        """The value for OTEL_EXPORTER_OTLP_ENDPOINT."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, request: ExportTraceServiceRequest) -> None:
        found: list[ReceivedSpan] = []
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            service = resource.get("service.name", "")
            for scope_spans in resource_spans.scope_spans:
                found.extend(_flatten(service, span) for span in scope_spans.spans)
        with self._lock:
            self._spans.extend(found)

    def trace(self, trace_id: str) -> list[ReceivedSpan]:
        """Every span received so far for one trace."""
        with self._lock:
            return [s for s in self._spans if s.trace_id == trace_id]


def _flatten(service: str, span: Any) -> ReceivedSpan:
    return ReceivedSpan(
        service=service,
        name=span.name,
        kind=Span.SpanKind.Name(span.kind),
        trace_id=span.trace_id.hex(),
        span_id=span.span_id.hex(),
        parent_span_id=span.parent_span_id.hex(),
        attributes={a.key: _value(a.value) for a in span.attributes},
    )


def _value(value: Any) -> Any:
    field = value.WhichOneof("value")
    return getattr(value, field) if field else None
