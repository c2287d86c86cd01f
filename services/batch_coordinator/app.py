"""Wiring: the runtime, the two durable consumers and the FastAPI app with probes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import FastAPI

from libs.bus import Context
from libs.clock import SYSTEM_CLOCK
from libs.events import BATCHES, OPERATIONS
from libs.models import model_for
from libs.service import Runtime, consumes, create_service_app
from libs.tools import default_registry

from .domain import COORDINATED
from .handlers import Coordinator
from .interrupted import InterruptedSweep
from .settings import SERVICE, Settings


@dataclass
class CoordinatorRuntime(Runtime):
    """Ready only once the projections were rebuilt from the streams."""

    rebuilt: asyncio.Event = field(default_factory=asyncio.Event)

    async def readiness(self) -> tuple[bool, str]:
        """Broker, streams and consumers in place, and the projections rebuilt."""
        if self.declare_problem is None and not self.rebuilt.is_set():
            return False, "rebuilding projections"
        return await super().readiness()


def create_app(settings: Settings | None = None) -> FastAPI:
    """The batch-coordinator service."""
    settings = settings or Settings.from_env()
    # One durable consumer per partition; each sees every message and works only on its own.
    part = settings.partition
    runtime = CoordinatorRuntime(
        name=SERVICE,
        settings=settings.bus,
        # Operations: only a silent member's `interrupted` rejection (interrupted.py).
        publishes=(Context.BATCHES, Context.DELIVERIES, Context.OPERATIONS),
        # Asked for at start-up, once the coordinator below (which takes the runtime) exists.
        consumers=lambda: (
            consumes(
                Context.OPERATIONS, OPERATIONS, coordinator.on_operation, partition=part,
                filter_subjects=lambda topology: topology.operation_kinds_filter(COORDINATED),
            ),
            consumes(
                Context.BATCHES, BATCHES, coordinator.on_batch, partition=part,
                filter_subjects=lambda topology: topology.kinds_filter(
                    Context.BATCHES, Coordinator.CONSUMED_BATCH_EVENTS
                ),
            ),
        ),
    )
    # Raises DeclarationError (the service does not start) on a bad tool declaration.
    coordinator = Coordinator(
        runtime,
        settings,
        model_for(settings.model),
        registry=default_registry(settings=settings.tools),
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
        runtime, title="holdline batch-coordinator", on_start=on_start, on_stop=on_stop
    )
