"""Executing the delivery policy's decisions on chat.

The consumer `interaction-surface-deliveries` reads every delivery event. Whenever a
delivery was handed over to be said now (`deliver_now` / `interrupt`), the surface:
`delivery.sent` (expected subject sequence: only one writer wins) → the assistant message
in the session's history (`turn.replied` carrying the `delivery_id`; the live view pushes it
on every WebSocket of the session) → `delivery.delivered`.

Every step is re-entrant: a crash after `sent` is finished by the redelivered message,
which finds the delivery `sent`, writes the message only if history lacks it (and with a
message id derived from the delivery, so even a racing duplicate is dropped by the broker)
and then marks it delivered. A delivery attached to a reply (`next_turn`) belongs to that
turn; it is finished here only if the turn ended without writing it.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

from libs import metrics
from libs.bus import ConcurrencyConflict, Context, Received, append
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    DELIVERIES,
    INTERACTION,
    DeliveryDelivered,
    DeliveryEvent,
    DeliverySent,
    Envelope,
    TurnReplied,
)
from libs.service import Runtime

from .auth import new_id
from .projections import SurfaceView
from .settings import Settings

log = logging.getLogger(__name__)

_RETRIES = 50


class TurnStillOpen(Exception):
    """A next-turn delivery whose turn has not replied yet: look again later."""


def _now() -> datetime:
    return datetime.now(UTC)


class DeliveryExecutor:
    """Says what the policy decided to say, exactly once per delivery."""

    def __init__(self, runtime: Runtime, view: SurfaceView, settings: Settings) -> None:
        self._rt = runtime
        self._view = view
        self._settings = settings

    async def on_delivery(self, received: Received[DeliveryEvent]) -> None:
        """Consumer handler: act on the delivery's current state."""
        await self._view.caught_up.wait()
        await self._view.wait_applied(Context.DELIVERIES, received.stream_seq)
        delivery_id = received.envelope.delivery_id
        if delivery_id:
            await self.execute(delivery_id)

    async def execute(self, delivery_id: str) -> None:
        """Move one delivery as far as it can go now."""
        for _ in range(_RETRIES):
            state = self._view.deliveries.get(delivery_id)
            if state is None:
                return
            try:
                if state.handed_off:
                    await self._send(state)
                elif state.status is DeliveryStatus.SENT:
                    await self._finish(state)
            except ConcurrencyConflict:
                # The policy (or another surface) wrote meanwhile: catch up and look again.
                await self._view.sync()
            else:
                return
        raise RuntimeError(f"delivery {delivery_id}: too many concurrent writers")

    async def _send(self, state: DeliveryState) -> None:
        sent = (
            DeliverySent(mode="interrupt", channel="chat")
            if state.decision == "interrupt"
            else DeliverySent(mode="proactive", channel="chat")
        )
        await self._append(state, sent)
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((_now() - state.ready_at).total_seconds(), 0.0)
            )
        current = self._view.deliveries.get(state.delivery_id)
        if current is not None:
            await self._finish(current)

    async def _finish(self, state: DeliveryState) -> None:
        found = self._view.log(state.session_id)
        written = found is not None and state.delivery_id in found.written
        if not written and state.mode == "next_turn":
            written = await self._turn_wrote(state)
        if not written:
            await self._write_message(state)
        current = self._view.deliveries.get(state.delivery_id)
        if current is not None and current.status is DeliveryStatus.SENT:
            await self._append(current, DeliveryDelivered())
            metrics.DELIVERIES.labels(mode=current.mode or "proactive", channel="chat").inc()

    async def _turn_wrote(self, state: DeliveryState) -> bool:
        """For an attached delivery: wait for its turn's reply; False if the turn died."""
        deadline = asyncio.get_running_loop().time() + self._settings.turn_timeout_s
        expiry = timedelta(seconds=self._settings.turn_timeout_s)
        while True:
            found = self._view.log(state.session_id)
            if found is None:
                return False
            if state.delivery_id in found.written:
                return True
            turn = found.open_turn
            if turn is None or _now() - turn[1] >= expiry:
                # The turn replied without it, or crashed: say it on its own.
                return False
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TurnStillOpen(state.delivery_id)
            await self._view.wait_session_change(state.session_id, min(remaining, 1.0))

    async def _write_message(self, state: DeliveryState) -> None:
        env = Envelope(
            event_id=new_id("ev"),
            occurred_at=_now(),
            session_id=state.session_id,
            turn_id=state.turn_id,
            batch_id=state.batch_id,
            delivery_id=state.delivery_id,
            agent=self._active_agent(state),
            event=TurnReplied(text=state.text),
        )
        ack = await append(
            self._rt.jetstream,
            INTERACTION,
            self._rt.topology.session_subject(state.session_id),
            env,
            # One message per delivery even if two writers race inside the dedup window.
            msg_id=f"message-{state.delivery_id}",
        )
        metrics.EVENTS_PUBLISHED.labels(stream="interaction").inc()
        if not ack.duplicate:
            await self._view.wait_applied(Context.INTERACTION, ack.seq)

    def _active_agent(self, state: DeliveryState) -> str | None:
        session = self._view.session(state.session_id)
        return session.agent if session is not None else state.agent

    async def _append(self, state: DeliveryState, event: DeliveryEvent) -> None:
        env = Envelope(
            event_id=new_id("ev"),
            occurred_at=_now(),
            session_id=state.session_id,
            turn_id=state.turn_id,
            batch_id=state.batch_id,
            delivery_id=state.delivery_id,
            agent=self._active_agent(state),
            event=event,
        )
        ack = await append(
            self._rt.jetstream,
            DELIVERIES,
            self._rt.topology.delivery_subject(state.session_id, state.delivery_id),
            env,
            expected_last_subject_seq=self._view.delivery_seq(state.delivery_id),
        )
        metrics.EVENTS_PUBLISHED.labels(stream="deliveries").inc()
        await self._view.wait_applied(Context.DELIVERIES, ack.seq)
