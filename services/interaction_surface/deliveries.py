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

Voice: while a call of the session is attached to this process (`CallRegistry`), a handed
over delivery is `delivery.sent` (channel voice) and spoken on the call with a mark named
after its id, in a task of its own so an urgent one can still cut in. A clean mark →
the message in history + `delivery.spoken`; a clear or a hang-up → `delivery.unheard`
with the played milliseconds (nothing in history), and the policy requeues it shorter.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from libs import metrics
from libs.bus import ConcurrencyConflict, Context, Received, append
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    DELIVERIES,
    INTERACTION,
    DeliveryAttached,
    DeliveryDelivered,
    DeliveryEvent,
    DeliverySent,
    DeliverySpoken,
    DeliveryUnheard,
    Envelope,
    TurnReceived,
    TurnReplied,
)
from libs.service import Runtime

from .auth import new_id
from .projections import Entry, SurfaceView
from .settings import Settings

if TYPE_CHECKING:
    from .playback import Settled
    from .telephony import Call, CallRegistry

log = logging.getLogger(__name__)

_RETRIES = 50


class TurnStillOpen(Exception):
    """A next-turn delivery whose turn has not replied yet: look again later."""


def _now() -> datetime:
    return datetime.now(UTC)


class DeliveryExecutor:
    """Says what the policy decided to say, exactly once per delivery."""

    def __init__(
        self,
        runtime: Runtime,
        view: SurfaceView,
        settings: Settings,
        calls: CallRegistry | None = None,
    ) -> None:
        self._rt = runtime
        self._view = view
        self._settings = settings
        self._calls = calls
        # Deliveries this process is playing on a call, by id.
        self._speaking: dict[str, asyncio.Task[None]] = {}

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
            if state is None or delivery_id in self._speaking:
                return
            call = self._calls.get(state.session_id) if self._calls is not None else None
            try:
                if state.handed_off and call is not None:
                    await self._speak(state, call)
                elif state.handed_off:
                    await self._send(state)
                elif state.status is DeliveryStatus.SENT and self._sent_on_voice(state):
                    await self._orphaned(state)
                elif state.status is DeliveryStatus.SENT:
                    await self._finish(state)
            except ConcurrencyConflict:
                # The policy (or another surface) wrote meanwhile: catch up and look again.
                await self._view.sync()
            else:
                return
        raise RuntimeError(f"delivery {delivery_id}: too many concurrent writers")

    # ------------------------------------------------------------------ voice

    async def _speak(self, state: DeliveryState, call: Call) -> None:
        interrupt = state.decision == "interrupt"
        sent = DeliverySent(mode="interrupt" if interrupt else "proactive", channel="voice")
        await self._append(state, sent)
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((_now() - state.ready_at).total_seconds(), 0.0)
            )
        delivery_id = state.delivery_id
        task = asyncio.create_task(self._play(delivery_id, state.text, call, interrupt=interrupt))
        self._speaking[delivery_id] = task
        task.add_done_callback(lambda _t: self._speaking.pop(delivery_id, None))

    async def _play(self, delivery_id: str, text: str, call: Call, *, interrupt: bool) -> None:
        try:
            state = self._view.deliveries.get(delivery_id)
            settled = await call.say(
                text,
                delivery_id,
                interrupt=interrupt,
                delivery_id=delivery_id,
                turn_id=state.turn_id if state is not None else None,
            )
            await self.settle_voice(delivery_id, settled, write=True)
        except Exception:
            log.exception("delivery %s: playback failed", delivery_id)

    async def settle_voice(self, delivery_id: str, settled: Settled, *, write: bool) -> None:
        """Spoken only on a clean mark; anything else is unheard (the policy retries it)."""
        for _ in range(_RETRIES):
            current = self._view.deliveries.get(delivery_id)
            if current is None or current.status is not DeliveryStatus.SENT:
                return
            try:
                if settled.heard:
                    found = self._view.log(current.session_id)
                    if write and (found is None or delivery_id not in found.written):
                        await self._write_message(current)
                    await self._append(current, DeliverySpoken())
                    mode = current.mode or "proactive"
                    metrics.DELIVERIES.labels(mode=mode, channel="voice").inc()
                else:
                    await self._append(
                        current, DeliveryUnheard(played_ms=settled.played_ms, reason=settled.reason)
                    )
            except ConcurrencyConflict:
                await self._view.sync()
            else:
                return

    def _sent_on_voice(self, state: DeliveryState) -> bool:
        """Sent on a call, or attached to the reply of a spoken turn: the call settles it."""
        found = self._view.log(state.session_id)
        entries = found.entries if found is not None else []
        channel: str | None = None
        for entry in entries:
            event = entry.envelope.event
            if entry.envelope.delivery_id != state.delivery_id:
                continue
            if isinstance(event, DeliverySent):
                channel = event.channel
            elif isinstance(event, DeliveryAttached):
                channel = self._turn_channel(entries, event.attached_to_turn_id)
        return channel == "voice"

    @staticmethod
    def _turn_channel(entries: list[Entry], turn_id: str) -> str | None:
        for entry in entries:
            event = entry.envelope.event
            if isinstance(event, TurnReceived) and entry.envelope.turn_id == turn_id:
                return event.channel
        return None

    async def _orphaned(self, state: DeliveryState) -> None:
        """Sent to a call this process does not hold: unheard once no call is attached."""
        session = self._view.session(state.session_id)
        if session is not None and any(c.startswith("call_") for c in session.connections):
            return
        await self._append(state, DeliveryUnheard(played_ms=0, reason="call_ended"))

    # ------------------------------------------------------------------ chat

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
