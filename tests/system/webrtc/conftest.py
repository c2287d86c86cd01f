"""One running system for the WebRTC tests (the voice tests' settings, Twilio signing on:
sessions a browser opens go through call tickets as the phone's do)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack
from testkit.voice import voice_stack

# A peer that sends nothing for this long is gone: short, so the vanishing test is quick.
MEDIA_TIMEOUT_S = "2"


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The system for one test module."""
    with voice_stack(
        broker, tmp_path_factory.mktemp("webrtc"),
        env={"HOLDLINE_WEBRTC_MEDIA_TIMEOUT_S": MEDIA_TIMEOUT_S},
    ) as running:
        yield running
