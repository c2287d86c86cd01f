"""Wiring: the runtime, the gate, its three durable consumers (consumers.py) and the
FastAPI app with probes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from fastapi import FastAPI

from libs import metrics
from libs.consumers import Consumers
from libs.roles import published_contexts
from libs.service import Runtime, create_service_app

from .consumers import CONSUMERS, DELIVERIES, INTERACTION, OPERATIONS, PUBLICATIONS
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
    # The composition root, in dependency order: runtime → gate → its consumers.
    runtime = PolicyRuntime(
        name=SERVICE, settings=settings.bus, publishes=published_contexts(PUBLICATIONS)
    )
    gate = Gate(runtime, settings)
    # One durable consumer per partition; each sees every message and works only on its own.
    consumers = Consumers(
        CONSUMERS,
        {
            INTERACTION.role: gate.on_interaction,
            OPERATIONS.role: gate.on_operation,
            DELIVERIES.role: gate.on_delivery,
        },
        partition=settings.partition,
    )

    async def on_start() -> None:
        await gate.hydrate()
        runtime.rebuilt.set()

    return create_service_app(
        runtime, consumers, title="holdline delivery-policy", on_start=on_start, on_stop=gate.stop
    )
