"""One running system for the voice tests, with Twilio signatures checked."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import Broker
from tests.surface.stack import SurfaceStack

from .phone import AUTH_TOKEN


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process on a prefix of its own."""
    logs: Path = tmp_path_factory.mktemp("voice")
    running = SurfaceStack(
        nats_url=broker.url,
        prefix=f"v{uuid.uuid4().hex[:10]}",
        logs=logs,
        env={
            "HOLDLINE_MIN_QUIET_MS": "300",
            "HOLDLINE_DELIVERY_WINDOW_MS": "20000",
            "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
            "HOLDLINE_VAD_MIN_SPEECH_MS": "60",
            "HOLDLINE_VAD_ENDPOINT_MS": "400",
        },
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
async def client(stack: SurfaceStack) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the surface."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
        yield http
