"""One running system for the whole access package: API keys, JWTs, declared agents, rate
limits, and a short-TTL surface.

The first surface runs the `literal` model (tool calls with verbatim arguments). The second
surface follows the same streams with a 2-second token lifetime, so one session
can be checked both fresh (first surface) and expired (second surface).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack

from .tenants import JWT, RATE_SESSION, RATE_TENANT, SECRETS, TOKEN_TTL_S, _keys


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, with keys, limits and secrets configured."""
    logs: Path = tmp_path_factory.mktemp("access")
    surface = {
        "HOLDLINE_TENANT_API_KEYS": _keys(),
        "HOLDLINE_RATE_SESSION": "/".join(str(n) for n in RATE_SESSION),
        "HOLDLINE_RATE_TENANT": "/".join(str(n) for n in RATE_TENANT),
        **JWT,
        "HOLDLINE_TOOL_MODULES": "tests.system.access.agents",
    }
    with running_stack(
        broker.url,
        logs,
        "a",
        env=dict(SECRETS),
        surface_env={
            **surface,
            "HOLDLINE_MODEL_MODULES": "tests.system.access.literal_model",
            "HOLDLINE_MODEL": "literal",
        },
        second_surface_env={**surface, **SECRETS, "HOLDLINE_TOKEN_TTL_S": str(TOKEN_TTL_S)},
    ) as running:
        yield running


@pytest.fixture
async def client(stack: SurfaceStack) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for the first surface."""
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as http:
        yield http
