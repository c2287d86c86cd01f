"""operation-worker: its consumers (operation events, work commands) and the callback route."""

from __future__ import annotations

from dataclasses import replace

from fastapi import FastAPI, Request
from fastapi.responses import Response

from libs import callback_secret, metrics, tracing
from libs.bus import ConnectedEventStore
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK
from libs.consumers import Bound, Consumers
from libs.domain import TERMINAL
from libs.json_response import JSONResponse
from libs.problems import install_problem_handlers, problem
from libs.roles import published_contexts
from libs.service import Runtime, create_service_app
from libs.tools import CallbackRefused, DeclarationError, default_registry, sandbox_client

from .consumers import CONSUMERS, DISPATCH, PUBLICATIONS, WORK
from .handlers import FOREIGN, Worker
from .settings import SERVICE, Settings

_MAX_CALLBACK_BYTES = 64 * 1024


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the worker's app; consumers start with it."""
    settings = settings or Settings.from_env()
    try:
        secret = callback_secret.resolve(
            settings.tools.callback_secret, settings.serve.http.host, service=SERVICE
        )
    except ValueError as exc:  # refused like a bad tool declaration: one line, no restart
        raise DeclarationError(str(exc)) from None
    settings = replace(settings, tools=replace(settings.tools, callback_secret=secret))
    # Calls to the system of record carry the operation's trace (none while tracing is off).
    client = sandbox_client(settings.tools, context=tracing.current_headers)
    # Raises DeclarationError (and the service does not start) on any bad tool declaration.
    registry = default_registry(client, settings.tools)
    metrics.initialise_tools(
        (t.name for t in registry.tools(include_internal=True)), [s.value for s in TERMINAL]
    )

    # The composition root, in dependency order: runtime → worker → its consumers.
    runtime = Runtime(
        name=SERVICE, settings=settings.bus, publishes=published_contexts(PUBLICATIONS)
    )
    # The process's one clock, id factory and event store, chosen here at its root; the store
    # reads the broker connection from the runtime once it is started.
    clock, ids = SYSTEM_CLOCK, RANDOM_IDS
    worker = Worker(
        runtime, registry, settings, store=ConnectedEventStore(runtime), clock=clock, ids=ids
    )
    tuning = {"max_in_flight": settings.max_in_flight, "batch": settings.work_batch}
    consumers = Consumers(
        CONSUMERS,
        {DISPATCH.role: Bound(worker.execute, **tuning), WORK.role: Bound(worker.work, **tuning)},
    )

    async def start() -> None:
        # One session per MCP server in this process, opened now rather than at first call.
        registry.open_sources()

    async def stop() -> None:
        await client.aclose()
        await registry.aclose()

    app = create_service_app(
        runtime, consumers, title="holdline operation-worker", on_start=start, on_stop=stop
    )
    install_problem_handlers(app)

    @app.post("/v1/callbacks/{executor}")
    async def callback(executor: str, request: Request) -> Response:
        """A provider's async completion, verified by the executor it names; applied once."""
        receiver = registry.callback_receiver(executor)
        if receiver is None:
            return problem(404, "Not found", f"no executor named {executor!r}")
        body = await request.body()
        if len(body) > _MAX_CALLBACK_BYTES:
            return problem(
                413, "Payload too large", f"callbacks are limited to {_MAX_CALLBACK_BYTES} bytes"
            )
        try:
            parsed = receiver.parse_callback(request.headers, body, now=clock.now().timestamp())
        except CallbackRefused as refused:
            return problem(refused.status, refused.title, refused.detail, slug=refused.slug)
        outcome = await worker.complete_from_callback(parsed, executor)
        if outcome == FOREIGN:
            return problem(
                422,
                "Invalid request",
                f"operation {parsed.operation_id} is not run by executor {executor!r}",
                slug="foreign-operation",
            )
        return JSONResponse({"callback_id": parsed.callback_id, "result": outcome})

    return app
