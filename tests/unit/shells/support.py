"""Helpers of the fast shell tests: a runtime that never connects, events put in a store."""

from __future__ import annotations

from typing import Any, TypeVar

from libs.bus import MemoryEventStore, Received
from libs.config import BusSettings
from libs.events import Envelope, EventCodec
from libs.service import Runtime

B = TypeVar("B")


def offline_runtime(name: str) -> Runtime:
    """A runtime for its topology only: a shell under test must reach no broker."""
    return Runtime(name=name, settings=BusSettings(prefix="fast"), publishes=())


async def put(
    store: MemoryEventStore, codec: EventCodec[Any], subject: str, env: Envelope[B]
) -> Received[B]:
    """Append as another writer would, and return it as a consumer would deliver it."""
    appended = await store.append(codec, subject, env)
    return Received(envelope=env, subject=subject, stream_seq=appended.seq, num_delivered=1)
