"""Wiring: the runtime, the gate, its three durable consumers (consumers.py) and the
FastAPI app with probes."""

from __future__ import annotations

from fastapi import FastAPI

from libs import metrics
from libs.consumers import Consumers
from libs.roles import published_contexts
from libs.service import RebuildingRuntime, create_service_app

from .consumers import CONSUMERS, DELIVERIES, INTERACTION, OPERATIONS, PUBLICATIONS
from .handlers import Gate
from .settings import SERVICE, Settings


def create_app(settings: Settings | None = None) -> FastAPI:
    """The delivery-policy service."""
    settings = settings or Settings.from_env()
    metrics.initialise_deliveries()
    # The composition root, in dependency order: runtime → gate → its consumers.
    # Ready only once the projections are rebuilt and open deliveries re-armed (`on_start`).
    runtime = RebuildingRuntime(
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
