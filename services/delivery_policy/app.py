"""Wiring: the runtime, three durable consumers and the FastAPI app with probes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI

from libs import metrics
from libs.bus import Context, DurableConsumer, spec_for
from libs.events import DELIVERIES, INTERACTION, OPERATIONS, EventCodec
from libs.service import ConsumerFactory, Runtime, create_service_app

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
    bus = settings.bus
    metrics.initialise_deliveries()
    runtime = PolicyRuntime(name=SERVICE, settings=bus, publishes=(Context.DELIVERIES,))
    gate = Gate(runtime, settings)
    # One durable consumer per partition; each sees every message and works only on its own.
    part = settings.partition

    def consumer(context: Context, codec: EventCodec[Any], handler: Any) -> ConsumerFactory:
        def build(rt: Runtime) -> DurableConsumer[Any]:
            spec = spec_for(
                rt.topology, context, durable=rt.topology.durable(SERVICE, context.value, part),
                ack_wait_s=bus.ack_wait_s, max_deliver=bus.max_deliver,
            )
            return DurableConsumer(
                rt.jetstream, spec, codec, handler, topology=rt.topology, source=context,
                redelivery_backoff_s=bus.redelivery_backoff_s, partition=part,
            )

        return build

    runtime.consumer_factories = [
        consumer(Context.INTERACTION, INTERACTION, gate.on_interaction),
        consumer(Context.OPERATIONS, OPERATIONS, gate.on_operation),
        consumer(Context.DELIVERIES, DELIVERIES, gate.on_delivery),
    ]

    async def on_start() -> None:
        await gate.hydrate()
        runtime.rebuilt.set()

    return create_service_app(
        runtime, title="holdline delivery-policy", on_start=on_start, on_stop=gate.stop
    )
