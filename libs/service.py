"""The thin shell every service shares: broker connection, declarations, consumers, probes.

A service lists the streams it publishes to and the consumers it reads; the runtime declares
them idempotently, runs the consumers, and answers `/readyz` with 200 only while the broker
is connected and every one of those streams (at its declared replica count) and consumers
exists. Start-up runs behind the HTTP server, so the probes answer from the first second and
say what the service waits for (the broker, a stream that cannot get its replicas); other
routes answer 503 problem+json until it is started. The consumers are declared as data
(`libs/roles.py`) and built by `libs/consumers.py`; the runtime runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import APIError
from nats.js.kv import KeyValue
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from libs import tracing
from libs.bus import (
    BUCKETS,
    Context,
    DurableConsumer,
    NatsEventStore,
    Topology,
    connect,
    ensure_buckets,
    ensure_streams,
)
from libs.config import BusSettings, BusTimings
from libs.consumers import Consumers
from libs.json_response import JSONResponse
from libs.problems import PROBLEM_JSON

log = logging.getLogger(__name__)

@dataclass
class Runtime:
    """A service's live connection to the broker and the consumers it runs."""

    name: str
    settings: BusSettings
    publishes: tuple[Context, ...]
    topology: Topology = field(init=False)
    nc: Client | None = None
    js: JetStreamContext | None = None
    buckets: dict[str, KeyValue] = field(default_factory=dict)
    # The consumers running (built from what `start` is given).
    running: list[DurableConsumer[Any]] = field(default_factory=list)
    # Set once declarations, consumers and the service's own start-up are done.
    started: asyncio.Event = field(default_factory=asyncio.Event)
    # Why the declarations do not succeed yet (retried until they do), for /readyz.
    declare_problem: str | None = None
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _ready_cache: tuple[float, bool, str] = (0.0, False, "starting")

    def __post_init__(self) -> None:
        self.topology = Topology(self.settings.prefix)

    @property
    def jetstream(self) -> JetStreamContext:
        """The JetStream context; only valid once started."""
        if self.js is None:
            raise RuntimeError(f"{self.name} is not connected")
        return self.js

    @property
    def timings(self) -> BusTimings:
        """The bus library's waits and read mode, from this process's settings."""
        return self.settings.timings

    @property
    def store(self) -> NatsEventStore:
        """The event store port over this runtime's broker and buckets; valid once started."""
        return NatsEventStore(self.jetstream, self.buckets, timings=self.timings)

    def bucket(self, purpose: str) -> KeyValue:
        """A declared KV bucket by purpose (e.g. "intents")."""
        return self.buckets[purpose]

    async def start(self, consumers: Consumers | None = None) -> None:
        """Connect, declare everything, start the consumers built from `consumers`. Retries
        until the broker answers."""
        tracing.configure(self.name)
        delay = 0.2
        while True:
            try:
                self.nc = await connect(self.settings, name=self.name)
                break
            except Exception as exc:  # noqa: BLE001 - keep trying whatever the failure
                log.warning("%s: broker not reachable yet (%s); retrying", self.name, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        self.js = self.nc.jetstream()
        await self._declare()
        built = consumers.build(self) if consumers is not None else []
        for consumer in built:
            self.running.append(consumer)
            self._tasks.append(asyncio.create_task(self._supervise(consumer)))

    async def _declare(self) -> None:
        """Streams and buckets, retried until the broker accepts them.

        A cluster with too few nodes for `HOLDLINE_STREAM_REPLICAS`, or a single node asked
        for more than one replica, refuses or times out: the service keeps trying and says
        why on /readyz, and becomes ready once the nodes are there.
        """
        assert self.js is not None
        delay = 0.5
        while True:
            try:
                await ensure_streams(self.js, self.topology, self.settings)
                await ensure_buckets(self.js, self.topology, self.settings)
                # Inside the retry: a clustered bucket just created can answer "stream not
                # found" for a moment while its replicas form their group.
                for purpose in BUCKETS:
                    self.buckets[purpose] = await self.js.key_value(self.topology.bucket(purpose))
            except Exception as exc:  # noqa: BLE001 - every refusal is retried, with its reason
                self.declare_problem = (
                    f"cannot declare the streams with {self.settings.replicas} replica(s): "
                    f"{_describe(exc)}"
                )
                self._ready_cache = (0.0, False, self.declare_problem)
                log.warning("%s: %s; retrying", self.name, self.declare_problem)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
                continue
            self.declare_problem = None
            return

    async def _supervise(self, consumer: DurableConsumer[Any]) -> None:
        # A consumer loop that dies (broker restart mid-declare) is started again.
        while not consumer.stopped:
            try:
                await consumer.run()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    "%s: consumer %s crashed; restarting", self.name, consumer.spec.durable
                )
            if not consumer.stopped:
                await asyncio.sleep(0.5)

    async def quiesce(self) -> None:
        """Stop pulling, let messages in hand finish within the grace period, and hand back
        (NAK) the rest for another process. Safe to call more than once."""
        for consumer in self.running:
            consumer.stop()
        if self._tasks:
            _done, pending = await asyncio.wait(
                self._tasks, timeout=self.settings.graceful_shutdown_s
            )
            if pending:
                handed_back = 0
                for consumer in self.running:
                    handed_back += await consumer.abandon()
                log.warning(
                    "%s: handed back %d in-flight messages after %.1f s",
                    self.name, handed_back, self.settings.graceful_shutdown_s,
                )
                _done, pending = await asyncio.wait(pending, timeout=5.0)
            for task in pending:
                task.cancel()
            self._tasks.clear()

    async def stop(self) -> None:
        """Quiesce, then drain the connection (pending acks and publishes go out)."""
        await self.quiesce()
        if self.nc is not None and not self.nc.is_closed:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.drain(), timeout=5.0)
        log.info("%s: drained", self.name)

    async def readiness(self) -> tuple[bool, str]:
        """Whether broker, streams and consumers are all in place (cached for a second)."""
        at, ok, detail = self._ready_cache
        if time.monotonic() - at < 1.0:
            return ok, detail
        ok, detail = await self._check()
        self._ready_cache = (time.monotonic(), ok, detail)
        return ok, detail

    async def _check(self) -> tuple[bool, str]:
        if self.declare_problem is not None:
            return False, self.declare_problem
        if self.nc is None or self.js is None or not self.nc.is_connected:
            return False, "broker not connected"
        if not self.started.is_set():
            return False, "starting"
        try:
            for context in self.publishes:
                info = await self.js.stream_info(self.topology.stream_name(context))
                replicas = info.config.num_replicas or 1
                if replicas < self.settings.replicas:
                    # Kept from before (an update the cluster refused): not what was asked.
                    return False, (
                        f"stream {info.config.name} has {replicas} replica(s), "
                        f"HOLDLINE_STREAM_REPLICAS={self.settings.replicas}"
                    )
            for consumer in self.running:
                if not consumer.ready.is_set():
                    return False, f"consumer {consumer.spec.durable} not started"
                await self.js.consumer_info(consumer.spec.stream, consumer.spec.durable)
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", with its reason
            return False, f"{type(exc).__name__}: {exc}"
        return True, "ok"


@dataclass
class RebuildingRuntime(Runtime):
    """A runtime whose service folds the streams into projections at start: ready only once
    its start-up set `rebuilt` (the batch-coordinator, the delivery-policy)."""

    rebuilt: asyncio.Event = field(default_factory=asyncio.Event)

    async def readiness(self) -> tuple[bool, str]:
        """Broker, streams and consumers in place, and the projections rebuilt."""
        if self.declare_problem is None and not self.rebuilt.is_set():
            return False, "rebuilding projections"
        return await super().readiness()


def _describe(exc: Exception) -> str:
    if isinstance(exc, APIError) and exc.description:
        return f"{exc.description} (JetStream error {exc.err_code})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


_PROBES = frozenset({"/healthz", "/readyz", "/metrics"})


class StartingGate:
    """Answers every route but the probes with 503 until the service has started.

    Pure ASGI, so it covers WebSockets too (closed with 1013, "try again later").
    """

    def __init__(self, app: Any, runtime: Runtime) -> None:
        self._app = app
        self._runtime = runtime

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        """Pass through once started; refuse politely before."""
        kind = scope["type"]
        if kind not in {"http", "websocket"} or self._runtime.started.is_set():
            await self._app(scope, receive, send)
            return
        if scope.get("path") in _PROBES:
            await self._app(scope, receive, send)
            return
        if kind == "websocket":
            await receive()  # websocket.connect
            await send({"type": "websocket.close", "code": 1013, "reason": "starting"})
            return
        body = JSONResponse(
            {
                "type": "https://holdline.dev/problems/unavailable",
                "title": "Service unavailable",
                "status": 503,
                "detail": "the service is starting; retry",
            },
            status_code=503,
            media_type=PROBLEM_JSON,
            headers={"Retry-After": "1"},
        )
        await body(scope, receive, send)


def _dump_tasks() -> None:
    for task in asyncio.all_tasks():
        stack = io.StringIO()
        task.print_stack(limit=12, file=stack)
        log.warning("task %s:\n%s", task.get_name(), stack.getvalue())


def _exit_if_failed(task: asyncio.Task[None]) -> None:
    # A start-up that fails (not one that waits: those retry) ends the process, as a failed
    # lifespan would, so the supervisor or the orchestrator starts it again.
    if task.cancelled() or task.exception() is None:
        return
    log.critical("start-up failed", exc_info=task.exception())
    logging.shutdown()
    os._exit(3)


def create_service_app(
    runtime: Runtime,
    consumers: Consumers | None = None,
    *,
    title: str,
    on_start: Callable[[], Awaitable[None]] | None = None,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> FastAPI:
    """A FastAPI app with the probes and metrics every service serves; `consumers` run
    from start-up."""

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # `kill -USR1 <pid>` logs every task's stack: what a stuck service is waiting for.
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks)

        async def start() -> None:
            await runtime.start(consumers)
            if on_start is not None:
                await on_start()
            runtime.started.set()
            log.info("%s: started", runtime.name)

        starting = asyncio.create_task(start(), name=f"{runtime.name}-start")
        starting.add_done_callback(_exit_if_failed)
        try:
            yield
        finally:
            if not starting.done():
                starting.remove_done_callback(_exit_if_failed)
                starting.cancel()
                with contextlib.suppress(BaseException):
                    await starting
            # Work in hand finishes (or goes back) while the service's resources still exist.
            await runtime.quiesce()
            if on_stop is not None and runtime.started.is_set():
                await on_stop()
            await runtime.stop()

    app = FastAPI(title=title, lifespan=lifespan, default_response_class=JSONResponse)
    app.add_middleware(StartingGate, runtime=runtime)
    # A trace starts at the HTTP request (a no-op until tracing is configured).
    app.add_middleware(tracing.TracingMiddleware)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": runtime.name}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        ok, detail = await runtime.readiness()
        return JSONResponse(
            {"ready": ok, "detail": detail, "service": runtime.name}, status_code=200 if ok else 503
        )

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app
