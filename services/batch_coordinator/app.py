"""Wiring: the runtime, the coordinator, its two durable consumers (consumers.py) and the
FastAPI app with probes."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI

from libs.clock import SYSTEM_CLOCK
from libs.consumers import Consumers
from libs.models import model_for
from libs.roles import published_contexts
from libs.service import RebuildingRuntime, create_service_app
from libs.tools import default_registry

from .consumers import BATCHES, CONSUMERS, OPERATIONS, PUBLICATIONS
from .handlers import Coordinator
from .interrupted import InterruptedSweep
from .settings import SERVICE, Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """The batch-coordinator service."""
    settings = settings or Settings.from_env()
    # The composition root, in dependency order: runtime → coordinator → its consumers.
    # Ready only once the projections are rebuilt from the streams (`on_start`).
    runtime = RebuildingRuntime(
        name=SERVICE, settings=settings.bus, publishes=published_contexts(PUBLICATIONS)
    )
    # Raises DeclarationError (the service does not start) on a bad tool declaration.
    coordinator = Coordinator(
        runtime,
        settings,
        model_for(settings.model, settings.model_modules),
        registry=default_registry(settings=settings.tools),
    )
    # One durable consumer per partition; each sees every message and works only on its own.
    consumers = Consumers(
        CONSUMERS,
        {OPERATIONS.role: coordinator.on_operation, BATCHES.role: coordinator.on_batch},
        partition=settings.partition,
    )

    sweep = InterruptedSweep(coordinator, settings, SYSTEM_CLOCK)
    sweeping: list[asyncio.Task[None]] = []

    async def on_start() -> None:
        await coordinator.hydrate()
        runtime.rebuilt.set()
        sweeping.append(asyncio.create_task(sweep.run(), name="interrupted-sweep"))

    async def on_stop() -> None:
        for task in sweeping:
            task.cancel()

    return create_service_app(
        runtime, consumers, title="holdline batch-coordinator", on_start=on_start, on_stop=on_stop
    )
