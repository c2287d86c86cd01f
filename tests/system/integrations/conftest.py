"""One running holdline for every framework test, and its client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from holdline.client import HoldlineClient, SessionClient
from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack

# A closing may wait this long for a quiet moment before it is left for the next turn: longer
# than any caller in these tests keeps talking.
INTEGRATION_ENV = {
    "HOLDLINE_MIN_QUIET_MS": "300",
    "HOLDLINE_DELIVERY_WINDOW_MS": "20000",
}


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system, shared by the three framework modules (each test uses its own sessions
    and resource names)."""
    with running_stack(
        broker.url, tmp_path_factory.mktemp("integrations"), "fw", env=INTEGRATION_ENV
    ) as running:
        yield running


@pytest.fixture
async def hl(stack: SurfaceStack) -> AsyncIterator[HoldlineClient]:
    """holdline's own client, pointed at the stack."""
    async with HoldlineClient(stack.url, timeout_s=15.0) as client:
        yield client


@pytest.fixture
async def session(hl: HoldlineClient) -> SessionClient:
    """A fresh session of the default agent."""
    return await hl.create_session(user_id=f"fw-{uuid.uuid4().hex[:8]}", tenant_id="acme")
