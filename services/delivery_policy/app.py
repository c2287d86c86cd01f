"""Wiring: the runtime, three durable consumers and the FastAPI app with probes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import FastAPI

from libs import metrics
from libs.bus import Context
from libs.domain.channel import FACT_EVENTS
from libs.events import DELIVERIES, INTERACTION, OPERATIONS
from libs.service import Runtime, consumes, create_service_app

from .domain import CONSUMED_DELIVERY_EVENTS
from .handlers import Gate
from .settings import SERVICE, Settings


@dataclass
class PolicyRuntime(Runtime):
    """Ready only once the projections were rebuilt and open deliveries re-armed."""

    rebuilt: asyncio.Event = field(default_factory=asyncio.Event)

    async def readiness(self) -> tuple[bool, str]:
        """Broker, streams and consumers in place, and the projections rebuilt."""
        if self.declare_problem is None and not self.rebuilt.is_set():
            return False, "rebuilding projections"
        return await super().readiness()


def create_app(settings: Settings | None = None) -> FastAPI:
    """The delivery-policy service."""
    settings = settings or Settings.from_env()
    metrics.initialise_deliveries()
    # One durable consumer per partition; each sees every message and works only on its own.
    part = settings.partition
    runtime = PolicyRuntime(
        name=SERVICE,
        settings=settings.bus,
        publishes=(Context.DELIVERIES,),
        # Asked for at start-up, once the gate below (which takes the runtime) exists.
        consumers=lambda: (
            consumes(Context.INTERACTION, INTERACTION, gate.on_interaction, partition=part),
            consumes(
                Context.OPERATIONS, OPERATIONS, gate.on_operation, partition=part,
                filter_subjects=lambda topology: topology.operation_kinds_filter(FACT_EVENTS),
            ),
            consumes(
                Context.DELIVERIES, DELIVERIES, gate.on_delivery, partition=part,
                filter_subjects=lambda topology: topology.kinds_filter(
                    Context.DELIVERIES, CONSUMED_DELIVERY_EVENTS
                ),
            ),
        ),
    )
    gate = Gate(runtime, settings)

    async def on_start() -> None:
        await gate.hydrate()
        runtime.rebuilt.set()

    return create_service_app(
        runtime, title="holdline delivery-policy", on_start=on_start, on_stop=gate.stop
    )
