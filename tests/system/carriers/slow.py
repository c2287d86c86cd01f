"""The spoken request every carrier's call makes, with a slow system of record."""

from __future__ import annotations

from testkit.phone import Phone, speech
from testkit.surface import SurfaceStack, fault
from testkit.voice import SPOKEN_REQUEST, SPOKEN_RESOURCES


async def slow_spoken_request(stack: SurfaceStack, phone: Phone) -> None:
    """Say `SPOKEN_REQUEST` while the provider answers 4 s late: no closing can start while
    the caller cuts the acceptance."""
    for name in SPOKEN_RESOURCES:
        await fault(stack, match=name, latency_ms=4000, times=1)
    await phone.talk(await speech(SPOKEN_REQUEST), realtime=False)
