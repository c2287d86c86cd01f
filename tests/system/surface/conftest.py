"""One running system per test module; every test opens its own sessions on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, on a prefix of its own."""
    with running_stack(
        broker.url,
        tmp_path_factory.mktemp("surface"),
        "s",
        env={"HOLDLINE_MIN_QUIET_MS": "1500"},
        second_surface_env={
            "HOLDLINE_MODEL_MODULES": "tests.system.surface.scripted_model",
            "HOLDLINE_MODEL": "faulty",
            "HOLDLINE_MODEL_TIMEOUT_S": "1",
        },
    ) as running:
        yield running
