"""Fixtures of the coordination tests: the scripted channel and the two real services."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.js import JetStreamContext

from libs.bus import Topology
from testkit.processes import Broker

from .harness import Scripted, Services, make_services


@pytest.fixture
def scripted(js: JetStreamContext, topology: Topology) -> Scripted:
    """Plays admission, the worker and the interaction surface."""
    return Scripted(js=js, topology=topology)


@pytest.fixture
def services(
    request: pytest.FixtureRequest,
    js: JetStreamContext,
    broker: Broker,
    prefix: str,
    logs_dir: Path,
) -> Iterator[Services]:
    """batch-coordinator and delivery-policy, started and ready (streams exist already).

    Parametrize indirectly with a dict to add environment variables for both services.
    """
    extra: dict[str, str] = getattr(request, "param", {})
    running = make_services(broker.url, prefix, logs_dir, **extra)
    running.start()
    yield running
    running.stop()
