"""The whole system as processes (the surface suite's stack), scraped right after start-up."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack

from .observed import RUNTIME_SERVICES, ObservedStack, scrape


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
