"""One running system for every hostile-input module: the fuzzers share it, as attackers would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.phone import AUTH_TOKEN
from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process on a prefix of its own, Twilio signatures checked."""
    with running_stack(
        broker.url,
        tmp_path_factory.mktemp("hostile"),
        "h",
        env={
            "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
            "HOLDLINE_VAD_ENDPOINT_MS": "400",
            # Erased sessions' settled business is purged within a second (test_erasure_scan).
            "HOLDLINE_ERASURE_SWEEP_S": "0.5",
            # Sessions idle for 2 s leave the surface's memory (test_idle_eviction); every
            # other test here runs with that going on.
            "HOLDLINE_SESSION_IDLE_S": "2",
            # The default burst of openings per address, refilled at 0.5/s instead of 6/s:
            # test_flooding's 80 openings then meet the limit however slowly they run.
            "HOLDLINE_RATE_OPEN_ADDRESS": "60/0.5",
        },
    ) as running:
        yield running
