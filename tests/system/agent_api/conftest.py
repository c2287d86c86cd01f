"""One running system for the Agent API suite, and helpers that read it through the client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from holdline.client import HoldlineClient
from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, the surface twice; a long proactive window (the tests hold
    the user talking), and call/agent ownership that expires fast (the kill tests)."""
    with running_stack(
        broker.url,
        tmp_path_factory.mktemp("agent_api"),
        "ag",
        env={
            "HOLDLINE_DELIVERY_WINDOW_MS": "30000",
            "HOLDLINE_CALL_OWNER_TTL_S": "3",
            "HOLDLINE_TOOL_MODULES": "tests.system.agent_api.tools_plugin",
        },
        # A second surface on the same streams: any process answers any request.
        second_surface_env={},
    ) as running:
        yield running


@pytest.fixture
async def hl(stack: SurfaceStack) -> AsyncIterator[HoldlineClient]:
    """The typed client on the stack's surface."""
    async with HoldlineClient(stack.url, timeout_s=20.0) as client:
        yield client
