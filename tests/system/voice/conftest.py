"""One running system for the voice tests, with Twilio signatures checked."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack
from testkit.voice import voice_stack


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system for one test module."""
    with voice_stack(broker, tmp_path_factory.mktemp("voice")) as running:
        yield running


@pytest.fixture
async def client(stack: SurfaceStack) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the surface."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
        yield http
