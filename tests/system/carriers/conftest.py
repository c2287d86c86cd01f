"""One running system for the carrier tests, with Telnyx's and Plivo's signatures checked."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.carriers import CARRIER_ENV
from testkit.processes import Broker
from testkit.surface import SurfaceStack
from testkit.voice import voice_stack


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system every carrier test here calls (signatures and tickets required)."""
    with voice_stack(broker, tmp_path_factory.mktemp("carriers"), env=CARRIER_ENV) as running:
        yield running
