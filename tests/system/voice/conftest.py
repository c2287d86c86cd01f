"""One running system for the voice tests, with Twilio signatures checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack
from testkit.voice import voice_stack


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system for one test module."""
    with voice_stack(broker, tmp_path_factory.mktemp("voice")) as running:
        yield running
