"""Chat as a delivery channel: always there, so the executor's last channel and its fallback.

A delivery handed over to be said now: `delivery.sent` (expected subject sequence: only one
writer wins) → the assistant message in the session's history (`turn.replied` carrying the
`delivery_id`; the live view pushes it on every WebSocket of the session) →
`delivery.delivered`. A crash after `sent` is finished by the redelivered message, which
finds the delivery `sent`, writes the message only if history lacks it (with a message id
derived from the delivery, so even a racing duplicate is dropped by the broker) and then
marks it delivered. A delivery attached to a reply (`next_turn`) belongs to that turn; it is
finished here only if the turn ended without writing it (`TurnStillOpen` meanwhile).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from libs import metrics
from libs.clock import Clock
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import DeliveryDelivered

from ..core.view import SurfaceView
from ..core.writes import SurfaceWrites
from ..delivery.channel import sent_event
from ..delivery.routing import Reach


class TurnStillOpen(Exception):
    """A next-turn delivery whose turn has not replied yet: look again later."""


class ChatChannel:
    """The session's chat: takes any delivery, finishes any send no other channel holds."""

    def __init__(
        self, view: SurfaceView, writes: SurfaceWrites, *, clock: Clock, turn_timeout_s: float
    ) -> None:
        self._view = view
        self._writes = writes
        self._clock = clock
        self._turn_timeout_s = turn_timeout_s

    def busy(self, delivery_id: str) -> bool:
        """Nothing is said on chat over time: never busy."""
        return False

    async def reach(self, state: DeliveryState) -> Reach:
        """Every session has its chat."""
        return Reach.TAKES

    def holds_sent(self, state: DeliveryState) -> bool:
        """Whatever no channel before it holds: sent on chat, or attached to a chat turn."""
        return True

    def strandable(self, state: DeliveryState) -> bool:
        """Chat has no connection to lose: its sends are finished by their own messages."""
        return False

    async def sweep(self) -> None:
        """No connections to record."""

    async def hand_over(self, state: DeliveryState) -> None:
        """`delivery.sent`, then the message and `delivery.delivered`."""
        await self._writes.delivery(state, sent_event(state, "chat"))
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((self._clock.now() - state.ready_at).total_seconds(), 0.0)
            )
        current = self._view.deliveries.get(state.delivery_id)
        if current is not None:
            await self.settle(current)

    async def settle(self, state: DeliveryState) -> None:
        """The message if history lacks it (and its turn did not write it), then delivered."""
        found = self._view.log(state.session_id)
        written = found is not None and state.delivery_id in found.written
        if not written and state.mode == "next_turn":
            written = await self._turn_wrote(state)
        if not written:
            await self._writes.write_message(state)
        current = self._view.deliveries.get(state.delivery_id)
        if current is not None and current.status is DeliveryStatus.SENT:
            await self._writes.delivery(current, DeliveryDelivered())
            metrics.DELIVERIES.labels(mode=current.mode or "proactive", channel="chat").inc()

    async def _turn_wrote(self, state: DeliveryState) -> bool:
        """For an attached delivery: wait for its turn's reply; False if the turn died."""
        deadline = asyncio.get_running_loop().time() + self._turn_timeout_s
        expiry = timedelta(seconds=self._turn_timeout_s)
        while True:
            found = self._view.log(state.session_id)
            if found is None:
                return False
            if state.delivery_id in found.written:
                return True
            turn = found.open_turn
            if turn is None or self._clock.now() - turn[1] >= expiry:
                # The turn replied without it, or crashed: say it on its own.
                return False
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TurnStillOpen(state.delivery_id)
            await self._view.wait_session_change(state.session_id, min(remaining, 1.0))
