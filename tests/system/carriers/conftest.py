"""One running system for the carrier tests, every carrier's signing set (Telnyx's and Plivo's
signatures, Vonage's signature secret, Exotel's Basic credentials), so every start needs a
call ticket or a session's token."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.carrier_phones import CARRIER_ENV as VONAGE_EXOTEL_ENV
from testkit.carriers import CARRIER_ENV as TELNYX_PLIVO_ENV
from testkit.processes import Broker
from testkit.surface import SurfaceStack
from testkit.voice import voice_stack


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system every carrier test here calls."""
    env = {**TELNYX_PLIVO_ENV, **VONAGE_EXOTEL_ENV}
    with voice_stack(broker, tmp_path_factory.mktemp("carriers"), env=env) as running:
        yield running
