"""What every whole-stack directory shares: an HTTP client on its `stack`'s surface."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from testkit.surface import SurfaceStack


@pytest.fixture
async def client(stack: SurfaceStack) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the surface of the directory's (or module's) stack."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
        yield http
