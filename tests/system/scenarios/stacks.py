"""The catalog's stacks: every service as a process, the phone scenarios' environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.phone import AUTH_TOKEN
from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack

# The phone scenarios' stack: signed Twilio streams, short endpointing and quiet windows.
PHONE_ENV = {
    "HOLDLINE_MIN_QUIET_MS": "300",
    "HOLDLINE_DELIVERY_WINDOW_MS": "20000",
    "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
    "HOLDLINE_VAD_MIN_SPEECH_MS": "60",
    "HOLDLINE_VAD_ENDPOINT_MS": "400",
}


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
