"""What a turn writes about the pending updates it looked at: a stale one refused with its
reason, the rest attached to the reply (`delivery.attached` first, so nobody else says
them), then, once the reply is written, marked delivered. Each is a guarded append that
holds only while the delivery's status still allows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from libs import metrics
from libs.bus import TooManyConflicts
from libs.domain import DeliveryState
from libs.domain.delivery import OPEN, DeliveryStatus
from libs.domain.relevance import Verdict, refusal_events
from libs.events import DeliveryAttached, DeliveryDelivered, DeliveryEvent, Envelope
from libs.models.interface import PendingUpdate

from ..core.view import SurfaceView
from ..core.writes import SurfaceWrites


class TurnDeliveries:
    """A turn's writes to the deliveries it attaches, refuses or delivers."""

    def __init__(self, view: SurfaceView, writes: SurfaceWrites) -> None:
        self._view = view
        self._writes = writes

    async def refuse(
        self, session_id: str, turn_id: str, delivery_id: str, verdict: Verdict
    ) -> None:
        """Record a stale update's fate; if the gate got there first, its record stands."""
        delivery = self._view.deliveries.get(delivery_id)
        if delivery is None:
            return
        for event in refusal_events(delivery, verdict):
            if not await self._append(
                session_id, delivery_id, event, turn_id=turn_id, allowed=OPEN
            ):
                return
        if verdict.stale:
            metrics.STALE_DELIVERIES.inc()

    async def attach(
        self, session_id: str, turn_id: str, updates: Sequence[PendingUpdate]
    ) -> list[PendingUpdate]:
        """Take each pending update for this reply; one said elsewhere meanwhile is dropped."""
        attached: list[PendingUpdate] = []
        for update in updates:
            ok = await self._append(
                session_id,
                update.delivery_id,
                DeliveryAttached(attached_to_turn_id=turn_id),
                turn_id=turn_id,
                allowed=frozenset({DeliveryStatus.PENDING, DeliveryStatus.WAITING}),
            )
            if ok:
                attached.append(update)
        return attached

    async def delivered(
        self, session_id: str, attached: Sequence[PendingUpdate], turn_id: str
    ) -> None:
        for update in attached:
            ok = await self._append(
                session_id,
                update.delivery_id,
                DeliveryDelivered(),
                turn_id=turn_id,
                allowed=frozenset({DeliveryStatus.SENT}),
            )
            if ok:
                metrics.DELIVERIES.labels(mode="next_turn", channel="chat").inc()

    async def _append(
        self,
        session_id: str,
        delivery_id: str,
        event: DeliveryEvent,
        *,
        turn_id: str,
        allowed: frozenset[DeliveryStatus],
    ) -> bool:
        """Append to a delivery with its expected sequence, if its status still allows it
        (read again after a lost race, under the one conflict policy); whether it was."""
        subject = self._writes.topology.delivery_subject(session_id, delivery_id)

        def decide(
            state: DeliveryState | None, item: DeliveryEvent, _now: datetime
        ) -> list[DeliveryEvent]:
            return [item] if state is not None and state.status in allowed else []

        def stamp(
            state: DeliveryState | None, item: DeliveryEvent, event_id: str, now: datetime
        ) -> Envelope[DeliveryEvent]:
            assert state is not None
            return Envelope(
                event_id=event_id,
                occurred_at=now,
                session_id=session_id,
                turn_id=turn_id,
                batch_id=state.batch_id,
                delivery_id=delivery_id,
                agent=state.agent,
                event=item,
            )

        try:
            written = await self._writes.deliveries.run(subject, decide, event, stamp=stamp)
        except TooManyConflicts:
            return False
        return bool(written.envelopes)
