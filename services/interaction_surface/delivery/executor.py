"""Executing the delivery policy's decisions, on whichever channel reaches the session.

The consumer `interaction-surface-deliveries` reads the delivery events after which there is
something to do (`routing.ACTED_ON`). For each, the executor asks its channels (`Channel`,
`channel.py`), in the order the composition root gave them, about the delivery as the live
view holds it, and `routing.route` names one step and its channel: hand it over (a call
speaks it, an agent is pushed it, chat sends it), leave it to the surface that holds the
session's connection, or settle what a channel left `sent`. The executor never looks at
what kind a channel is; chat, last in the order, takes what no other channel reaches.

Every step is re-entrant (a crash after `sent` is finished by the redelivered message), each
guarded append takes the delivery's expected sequence, and a lost race catches the view up
and routes again, under the one `ConflictRetry` policy.

Several surfaces share the consumer, so a delivery may reach a process that does not hold
the session's connection. That process leaves it alone while the holder is alive; the
holder watches its connections' sessions (`watch`) and says it. A connection whose holder
died is settled by whichever surface sweeps first (`sweep`, at start-up, then every TTL).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from libs.bus import (
    CONFLICT_RETRY,
    ConcurrencyConflict,
    ConflictRetry,
    Context,
    Received,
    TooManyConflicts,
)
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import DeliveryEvent

from ..core.view import SurfaceView
from .channel import Channel, LookAgain, Watched
from .routing import Act, Report, channel_question, route

log = logging.getLogger(__name__)


class DeliveryExecutor:
    """Says what the policy decided to say, exactly once per delivery, on its channel."""

    def __init__(
        self,
        view: SurfaceView,
        channels: Sequence[Channel],
        *,
        retry: ConflictRetry = CONFLICT_RETRY,
    ) -> None:
        self._view = view
        # In routing order; the last one takes whatever no other reaches.
        self._channels = tuple(channels)
        self._retry = retry
        self._watchers: set[asyncio.Task[None]] = set()

    async def on_delivery(self, received: Received[DeliveryEvent]) -> None:
        """Consumer handler: act on the delivery's current state."""
        await self._view.caught_up.wait()
        await self._view.wait_applied(Context.DELIVERIES, received.stream_seq)
        # A session evicted from memory (core/eviction.py) is read back before acting.
        await self._view.restore(received.envelope.session_id)
        delivery_id = received.envelope.delivery_id
        if delivery_id:
            await self.execute(delivery_id)

    def busy(self, delivery_id: str) -> bool:
        """Whether a channel of this process is saying the delivery right now."""
        return any(channel.busy(delivery_id) for channel in self._channels)

    async def execute(self, delivery_id: str) -> None:
        """Move one delivery as far as it can go now."""
        for _ in range(self._retry.attempts):
            state = self._view.deliveries.get(delivery_id)
            if state is None or self.busy(delivery_id):
                return
            try:
                step = route(state, await self._reports(state))
                if step.channel is not None:
                    channel = self._channels[step.channel]
                    if step.act is Act.HAND_OVER:
                        await channel.hand_over(state)
                    elif step.act is Act.SETTLE:
                        await channel.settle(state)
            except ConcurrencyConflict:
                # The policy (or another surface) wrote meanwhile: catch up and look again.
                await self._view.sync()
            except LookAgain:
                continue
            else:
                return
        raise TooManyConflicts(f"delivery {delivery_id}", self._retry.attempts)

    async def _reports(self, state: DeliveryState) -> list[Report]:
        """Each channel's answer to the one question the delivery's state asks."""
        match channel_question(state):
            case "reach":
                return [Report(reach=await c.reach(state)) for c in self._channels]
            case "sent":
                return [Report(holds_sent=c.holds_sent(state)) for c in self._channels]
            case None:
                return []

    # ------------------------------------------------------------------ several surfaces

    def watch(self, connection: Watched) -> None:
        """Say whatever is handed over for the connection's session while it is open,
        whoever consumed it (a call, as it attaches)."""
        self.follow(connection)

    def follow(self, connection: Watched) -> asyncio.Task[None]:
        """`watch`, returning the watcher's task (an agent's socket cancels it on leaving)."""
        task = asyncio.create_task(self._watch(connection))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)
        return task

    async def _watch(self, connection: Watched) -> None:
        while not connection.closed:
            for state in self._view.session_deliveries(connection.session_id):
                if state.handed_off and not self.busy(state.delivery_id):
                    try:
                        await self.execute(state.delivery_id)
                    except Exception:
                        log.exception("delivery %s: not executed", state.delivery_id)
            await self._view.wait_session_change(connection.session_id, 1.0)

    async def sweep(self) -> int:
        """Settle deliveries left `sent` on connections that may be gone, then let every
        channel record the end of its dead connections; how many deliveries were looked at."""
        stuck = [
            d.delivery_id for d in list(self._view.deliveries.states.values())
            if d.status is DeliveryStatus.SENT and not self.busy(d.delivery_id)
            and any(channel.strandable(d) for channel in self._channels)
        ]
        for delivery_id in stuck:
            try:
                await self.execute(delivery_id)
            except Exception:
                log.exception("delivery %s: sweep failed", delivery_id)
        # After the deliveries: settling one records its dead connection first, with the
        # reason (a call's `call_lost`) that only a still-attached connection can give.
        for channel in self._channels:
            await channel.sweep()
        return len(stuck)
