"""A phone call as a delivery channel: the adapter over `CallRegistry`, `Call` and
`CallOwnership` that the delivery executor asks (`delivery/channel.py`).

While a call of the session is attached to this process, a handed-over delivery is
`delivery.sent` (channel voice) and spoken on the call with a mark named after its id, in a
task of its own so an urgent one can still cut in. A clean mark → the message in history +
`delivery.spoken`; a clear or a hang-up → `delivery.unheard` with the played milliseconds
(nothing in history), and the policy requeues it shorter.

Several surfaces: a delivery handed over for a call another live surface holds is left to
that surface (`HELD_ELSEWHERE`; its watcher speaks it). A call whose owner died (its key in
the calls bucket expired) is settled by whichever surface sweeps first:
`channel.disconnected` (reason `owner_lost`) for the call, then `delivery.unheard` (reason
`call_lost`) for what it left `sent`, so the policy puts the delivery back and the next
contact, by call or chat, gets it once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from libs import metrics
from libs.bus import TooManyConflicts
from libs.clock import Clock, Ids
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    ChannelDisconnected,
    DeliveryAttached,
    DeliverySent,
    DeliverySpoken,
    DeliveryUnheard,
    Envelope,
    TurnReceived,
)

from ..core.session_log import Entry
from ..core.view import SurfaceView
from ..core.writes import SurfaceWrites
from ..delivery.channel import LookAgain, sent_event
from ..delivery.routing import Reach
from .ownership import CallOwnership
from .playback import Settled, carried_heard
from .registry import CallRegistry

if TYPE_CHECKING:
    from .call import Call

log = logging.getLogger(__name__)


def sent_on_voice(entries: Sequence[Entry], delivery_id: str) -> bool:
    """Sent on a call, or attached to the reply of a spoken turn: the call settles it."""
    channel: str | None = None
    for entry in entries:
        event = entry.envelope.event
        if entry.envelope.delivery_id != delivery_id:
            continue
        if isinstance(event, DeliverySent):
            channel = event.channel
        elif isinstance(event, DeliveryAttached):
            channel = _turn_channel(entries, event.attached_to_turn_id)
    return channel == "voice"


def _turn_channel(entries: Sequence[Entry], turn_id: str) -> str | None:
    for entry in entries:
        event = entry.envelope.event
        if isinstance(event, TurnReceived) and entry.envelope.turn_id == turn_id:
            return event.channel
    return None


def lost_reason(dead_calls: Sequence[str]) -> str:
    """Why a delivery sent to a call nobody holds went unheard."""
    return "call_lost" if dead_calls else "call_ended"


class CallChannel:
    """Speaks deliveries on the calls this process holds and settles what calls left `sent`."""

    def __init__(
        self,
        view: SurfaceView,
        writes: SurfaceWrites,
        calls: CallRegistry,
        ownership: CallOwnership,
        *,
        clock: Clock,
        ids: Ids,
    ) -> None:
        self._view = view
        self._writes = writes
        self._calls = calls
        # Who holds each call (its bucket opens when voice starts); until it is open every
        # call is taken to be alive (one process).
        self._ownership = ownership
        self._clock = clock
        self._ids = ids
        # Deliveries this process is playing on a call, by id.
        self._speaking: dict[str, asyncio.Task[None]] = {}

    # ------------------------------------------------------------------ the Channel protocol

    def busy(self, delivery_id: str) -> bool:
        """Being played on a call of this process."""
        return delivery_id in self._speaking

    async def reach(self, state: DeliveryState) -> Reach:
        """A call here takes it; one held by another live surface is left to it."""
        if self._calls.get(state.session_id) is not None:
            return Reach.TAKES
        if await self._live_calls(state.session_id):
            return Reach.HELD_ELSEWHERE
        return Reach.ABSENT

    async def hand_over(self, state: DeliveryState) -> None:
        """`delivery.sent` (voice), then the call speaks it in a task of its own."""
        call = self._calls.get(state.session_id)
        if call is None:
            raise LookAgain(state.delivery_id)  # hung up since `reach`
        interrupt = state.decision == "interrupt"
        await self._writes.delivery(state, sent_event(state, "voice"))
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((self._clock.now() - state.ready_at).total_seconds(), 0.0)
            )
        delivery_id = state.delivery_id
        task = asyncio.create_task(
            self._play(delivery_id, state.text, call, interrupt=interrupt)
        )
        self._speaking[delivery_id] = task
        task.add_done_callback(lambda _t: self._speaking.pop(delivery_id, None))

    def holds_sent(self, state: DeliveryState) -> bool:
        """Sent on a call, or attached to the reply of a spoken turn."""
        found = self._view.log(state.session_id)
        return sent_on_voice(found.entries if found is not None else [], state.delivery_id)

    def strandable(self, state: DeliveryState) -> bool:
        """Whatever a call left `sent`: its process may have died."""
        return self.holds_sent(state)

    async def settle(self, state: DeliveryState) -> None:
        """Sent to a call this process is not playing: unheard once no call is alive."""
        if await self._live_calls(state.session_id):
            return
        dead = self._calls_of(state.session_id)
        for connection_id in dead:
            await self._write_lost(state.session_id, connection_id)
        reason = lost_reason(dead)
        current = self._view.deliveries.get(state.delivery_id)
        if current is not None and current.status is DeliveryStatus.SENT:
            await self._writes.delivery(current, DeliveryUnheard(played_ms=0, reason=reason))

    async def sweep(self) -> None:
        """Calls still recorded attached whose surface died: record their end for them.

        Without it a session keeps a caller attached that nobody holds (and, if the call died
        mid-sentence, a caller speaking), so what it is owed waits for a turn instead of the
        caller's next call. A call is claimed before it is recorded attached, so an unclaimed
        one is a dead one.
        """
        if not self._ownership.ready:
            return
        for session_id, session in list(self._view.sessions.states.items()):
            local = self._calls.get(session_id)
            for connection_id in sorted(c for c in session.connections if c.startswith("call_")):
                if local is not None and local.connection_id == connection_id:
                    continue
                if await self._ownership.owner_of(connection_id) is None:
                    await self._write_lost(session_id, connection_id)

    # ------------------------------------------------------------------ playing and settling

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

    async def settle_voice(
        self, delivery_id: str, settled: Settled, *, write: bool, within_reply: bool = False
    ) -> None:
        """Spoken only on a clean mark; anything else is unheard (the policy retries it).

        A delivery attached to a reply (`within_reply`) that was cut is spoken when all of its
        words are in what the history keeps of that reply: saying it again would repeat it,
        and leaving it out would make the history claim words the record calls unheard.
        """

        async def attempt() -> None:
            current = self._view.deliveries.get(delivery_id)
            if current is None or current.status is not DeliveryStatus.SENT:
                return
            heard = carried_heard(current.text, settled) if within_reply else settled.heard
            if heard:
                found = self._view.log(current.session_id)
                if write and (found is None or delivery_id not in found.written):
                    await self._writes.write_message(current)
                await self._writes.delivery(current, DeliverySpoken())
                mode = current.mode or "proactive"
                metrics.DELIVERIES.labels(mode=mode, channel="voice").inc()
            else:
                await self._writes.delivery(
                    current, DeliveryUnheard(played_ms=settled.played_ms, reason=settled.reason)
                )

        try:
            await self._writes.retrying(f"delivery {delivery_id}", attempt)
        except TooManyConflicts:
            log.warning("delivery %s: not settled, too many concurrent writers", delivery_id)

    # ------------------------------------------------------------------ liveness

    def _calls_of(self, session_id: str) -> list[str]:
        session = self._view.session(session_id)
        connections = session.connections if session is not None else frozenset()
        return sorted(c for c in connections if c.startswith("call_"))

    async def _live_calls(self, session_id: str) -> bool:
        """Whether a call of the session is attached to a live surface (this one or not)."""
        calls = self._calls_of(session_id)
        if not self._ownership.ready:
            return bool(calls)
        for connection_id in calls:
            if await self._ownership.owner_of(connection_id) is not None:
                return True
        return False

    async def _write_lost(self, session_id: str, connection_id: str) -> None:
        """The call's process died without recording its end: record it for it."""
        env = Envelope(
            event_id=self._ids.new("ev"),
            occurred_at=self._clock.now(),
            session_id=session_id,
            event=ChannelDisconnected(
                channel="voice", connection_id=connection_id, reason="owner_lost"
            ),
        )
        # Several sweepers may find the same dead call: one record.
        await self._writes.record(env, f"owner-lost-{connection_id}")
