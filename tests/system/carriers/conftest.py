"""One running system for the carrier tests: Vonage's signature secret and Exotel's Basic
credentials set, so every start needs a call ticket or a session's token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.carrier_phones import CARRIER_ENV
from testkit.processes import Broker
from testkit.surface import SurfaceStack
from testkit.voice import voice_stack


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system for the carriers' tests."""
    with voice_stack(broker, tmp_path_factory.mktemp("carriers"), env=CARRIER_ENV) as running:
        yield running
