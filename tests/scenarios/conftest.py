"""Shared fixtures of the catalog: one running system per module, an HTTP client on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from harness.processes import Broker
from harness.surface import SurfaceStack, running_stack


def running(
    broker: Broker,
    factory: pytest.TempPathFactory,
    env: dict[str, str],
    surface_env: dict[str, str] | None = None,
) -> Iterator[SurfaceStack]:
    """Every service as a process on a prefix of its own, stopped at the end."""
    with running_stack(
        broker.url, factory.mktemp("scenarios"), "c", env=env, surface_env=surface_env or {}
    ) as stack:
        yield stack


@pytest.fixture
async def client(stack: SurfaceStack) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the surface of the module's stack."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
        yield http
