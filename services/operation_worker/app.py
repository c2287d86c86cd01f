"""operation-worker: consumers for dispatch and work, plus the callback route."""

from __future__ import annotations

import time
from typing import Any

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from libs import metrics, tracing
from libs.bus import Context, DurableConsumer
from libs.domain import TERMINAL
from libs.events import OPERATIONS, WORK
from libs.problems import install_problem_handlers, problem
from libs.service import Runtime, create_service_app
from libs.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from libs.tools import default_registry, sandbox_client

from .handlers import Worker
from .settings import Settings

_MAX_CALLBACK_BYTES = 64 * 1024


class CallbackBody(msgspec.Struct, frozen=True, kw_only=True):
    """What a provider's completion callback must carry (other fields are ignored)."""

    callback_id: str
    reference: str | None = None
    status: str
    record: dict[str, Any]


_CALLBACK = msgspec.json.Decoder(CallbackBody)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the worker's app; consumers start with it."""
    settings = settings or Settings.from_env()
    client = sandbox_client()
    # Calls to the system of record carry the operation's trace (a no-op while tracing is off).
    client.event_hooks["request"].append(tracing.inject_headers)
    registry = default_registry(client)
    metrics.initialise_tools(
        (t.name for t in registry.tools(include_internal=True)), [s.value for s in TERMINAL]
    )
    holder: dict[str, Worker] = {}

    def worker(runtime: Runtime) -> Worker:
        if "w" not in holder:
            holder["w"] = Worker(
                runtime.jetstream,
                runtime.topology,
                registry,
                settings,
                leases=runtime.bucket("leases"),
            )
        return holder["w"]

    def dispatch(runtime: Runtime) -> DurableConsumer[Any]:
        return runtime.consumer(
            Context.OPERATIONS,
            durable="operation-worker-dispatch",
            codec=OPERATIONS,
            handler=worker(runtime).dispatch,
        )

    def work(runtime: Runtime) -> DurableConsumer[Any]:
        # One message at a time per operation, many operations at once per worker.
        return runtime.consumer(
            Context.WORK,
            durable="operation-worker-work",
            codec=WORK,
            handler=worker(runtime).work,
            group_by=lambda subject: subject,
            max_in_flight=settings.max_in_flight,
        )

    runtime = Runtime(
        name="operation-worker",
        settings=settings.bus,
        publishes=(Context.OPERATIONS, Context.WORK, Context.DLQ),
        consumer_factories=(dispatch, work),
    )

    async def stop() -> None:
        await client.aclose()

    app = create_service_app(runtime, title="holdline operation-worker", on_stop=stop)
    install_problem_handlers(app)

    @app.post("/v1/callbacks/{provider}")
    async def callback(provider: str, request: Request) -> Response:
        """A provider's signed async completion; applying it twice changes nothing."""
        if provider != "sandbox":
            return problem(404, "Not found", f"no provider named {provider!r}")
        body = await request.body()
        if len(body) > _MAX_CALLBACK_BYTES:
            return problem(
                413, "Payload too large", f"callbacks are limited to {_MAX_CALLBACK_BYTES} bytes"
            )
        if not verify(
            settings.callback_secret,
            request.headers.get(TIMESTAMP_HEADER),
            request.headers.get(SIGNATURE_HEADER),
            body,
            now=time.time(),
        ):
            return problem(
                401,
                "Unauthorized",
                "missing, stale or wrong callback signature",
                slug="bad-signature",
            )
        try:
            payload = _CALLBACK.decode(body)
        except msgspec.DecodeError as exc:
            return problem(400, "Bad request", str(exc), slug="bad-callback")
        if not payload.reference:
            return problem(
                422, "Invalid request", "callback carries no reference", slug="no-reference"
            )
        if "w" not in holder:
            return problem(503, "Service unavailable", "the worker is still starting")
        outcome = await holder["w"].complete_from_callback(payload.reference, payload.record)
        return JSONResponse({"callback_id": payload.callback_id, "result": outcome})

    return app
