"""The whole system as processes (the surface suite's stack), scraped right after start-up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack

# The services that serve libs.metrics (the sandbox provider has a registry of its own).
RUNTIME_SERVICES = (
    "interaction_surface",
    "operation_worker",
    "batch_coordinator",
    "delivery_policy",
)


def scrape(stack: SurfaceStack, service: str) -> str:
    """One service's /metrics text."""
    response = httpx.get(f"{stack.procs[service].base_url}/metrics", timeout=10.0)
    response.raise_for_status()
    return response.text


@dataclass
class ObservedStack:
    """A running stack and what every service exported before any traffic."""

    stack: SurfaceStack
    at_start: dict[str, str]


@pytest.fixture(scope="module")
def observed(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ObservedStack]:
    """Every service as a process, on a prefix of its own; scraped once ready."""
    logs: Path = tmp_path_factory.mktemp("observability")
    running = SurfaceStack(
        nats_url=broker.url,
        prefix=f"o{uuid.uuid4().hex[:10]}",
        logs=logs,
        env={"HOLDLINE_MIN_QUIET_MS": "300", "HOLDLINE_DELIVERY_WINDOW_MS": "1500"},
    )
    try:
        running.start()
        yield ObservedStack(running, {name: scrape(running, name) for name in RUNTIME_SERVICES})
    finally:
        running.stop()
