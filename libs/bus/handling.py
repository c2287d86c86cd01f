"""What a consumer hands its handler, how a handler refuses a message for good, and how a
handler is run through a broker's absence and retried after a failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from libs.events import Envelope

from .store import broker_unavailable

log = logging.getLogger(__name__)

B = TypeVar("B")


class Poison(Exception):
    """Raised by a handler for a message that can never succeed: dead-letter it now."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Received(Generic[B]):
    """A decoded message with its place in the stream."""

    envelope: Envelope[B]
    subject: str
    stream_seq: int
    num_delivered: int
    # As the broker stored them with the message (the guards it was appended under included).
    headers: dict[str, str] | None = None


Handler = Callable[[Received[B]], Awaitable[None]]


def redelivery_delay(base_s: float, num_delivered: int) -> float:
    """How long a failed message waits before its next delivery."""
    # Exponential, capped: a flapping dependency gets room without stalling a session long.
    return float(min(base_s * (2 ** max(0, num_delivered - 1)), 30.0))


async def patiently(
    handler: Handler[B], received: Received[B], *, patience_s: float, name: str
) -> None:
    """Run the handler; while the broker cannot answer, run it again here.

    A node dying makes its streams and consumers elect new leaders for a few seconds.
    Failing the delivery then would spend `max_deliver` on the broker's absence and
    dead-letter good work; the message stays in hand (the heartbeat keeps it) and the
    idempotent handler runs again once the broker answers, for up to `patience_s`
    (HOLDLINE_BROKER_PATIENCE_S through `BusTimings`).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience_s
    delay = 0.1
    while True:
        try:
            await handler(received)
        except Exception as exc:
            if not broker_unavailable(exc) or loop.time() >= deadline:
                raise
            log.info("%s: broker unavailable (%r); handling again", name, exc)
        else:
            return
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
