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

An external agent (Agent API, `agent_channel.py`) is a channel like a call: a handed-over
delivery is pushed to its WebSocket and settled by its acknowledgements.

Several surfaces: the deliveries consumer is shared, so a delivery handed over for a call
may reach a process that does not hold the call. That process leaves it alone while the
call's owner is alive (`CallOwnership`); the owner watches its calls' sessions and speaks
it. A call whose owner died (its key expired) is settled by whichever surface sweeps first
(at start-up, then every TTL): `channel.disconnected` (reason `owner_lost`) for the call,
then `delivery.unheard` (reason `call_lost`) for what it left `sent`, so the policy puts the
delivery back and the next contact, by call or chat, gets it once.

Which of these steps a delivery takes is decided by `routing.route`; this module executes
it. About 400 lines: each channel's execution (chat, call, agent, the sweeps) is here.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from libs import metrics
from libs.bus import ConcurrencyConflict, Context, Received, append
from libs.clock import Clock, Ids
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.domain.delivery import envelope_for as delivery_envelope
from libs.events import (
    DELIVERIES,
    INTERACTION,
    ChannelDisconnected,
    DeliveryDelivered,
    DeliveryEvent,
    DeliverySpoken,
    DeliveryUnheard,
    Envelope,
    TurnReplied,
)
from libs.service import Runtime

from ..projections import SurfaceView
from ..settings import Settings
from ..voice.playback import Settled, carried_heard
from .routing import (
    Channels,
    Route,
    lost_reason,
    needs_liveness,
    route,
    sent_event,
    sent_on_voice,
)

if TYPE_CHECKING:
    from ..agent_channel import AgentChannel
    from ..voice.call import Call, CallRegistry
    from ..voice.ownership import CallOwnership

log = logging.getLogger(__name__)

_RETRIES = 50


class TurnStillOpen(Exception):
    """A next-turn delivery whose turn has not replied yet: look again later."""



class DeliveryExecutor:
    """Says what the policy decided to say, exactly once per delivery."""

    def __init__(
        self,
        runtime: Runtime,
        view: SurfaceView,
        settings: Settings,
        calls: CallRegistry | None = None,
        *,
        clock: Clock,
        ids: Ids,
        agent: AgentChannel | None = None,
        ownership: CallOwnership | None = None,
    ) -> None:
        self._rt = runtime
        self._clock = clock
        self._ids = ids
        self._view = view
        self._settings = settings
        self._calls = calls
        # Deliveries this process is playing on a call, by id.
        self._speaking: dict[str, asyncio.Task[None]] = {}
        # Who holds each call (its bucket opens when voice starts); until it is open, or
        # without it, every call is taken to be alive (one process).
        self.ownership = ownership
        self._watchers: set[asyncio.Task[None]] = set()
        # The Agent API's channel (agent_channel.py), given by the composition root.
        self.agent: AgentChannel | None = agent

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
            agent = self.agent
            try:
                step = route(state, await self._channels(state, call))
                match step:
                    case Route.SPEAK:
                        assert call is not None
                        await self._speak(state, call)
                    case Route.AGENT:
                        assert agent is not None
                        await agent.hand_over(state)
                    case Route.CHAT:
                        await self._send(state)
                    case Route.SETTLE_VOICE:
                        await self._orphaned(state)
                    case Route.SETTLE_AGENT:
                        assert agent is not None
                        await agent.orphaned(state)
                    case Route.FINISH_CHAT:
                        await self._finish(state)
                    case Route.LEAVE_TO_OWNER | Route.NOTHING:
                        pass
            except ConcurrencyConflict:
                # The policy (or another surface) wrote meanwhile: catch up and look again.
                await self._view.sync()
            else:
                return
        raise RuntimeError(f"delivery {delivery_id}: too many concurrent writers")

    async def _channels(self, state: DeliveryState, call: Call | None) -> Channels:
        """What the session has, looked up only as far as the route depends on it."""
        agent = self.agent
        local = call is not None
        live = needs_liveness(state, local_call=local) and await self._live_calls(
            state.session_id
        )
        sent = state.status is DeliveryStatus.SENT and not state.handed_off
        on_voice = sent and self._sent_on_voice(state)
        on_agent = sent and not on_voice and agent is not None and agent.sent_on_agent(state)
        return Channels(
            local_call=local,
            live_call=live,
            agent=state.handed_off and agent is not None and agent.serves(state.session_id),
            sent_on_voice=on_voice,
            sent_on_agent=on_agent,
        )

    # ------------------------------------------------------------------ voice

    async def _speak(self, state: DeliveryState, call: Call) -> None:
        interrupt = state.decision == "interrupt"
        await self._append(state, sent_event(state, "voice"))
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((self._clock.now() - state.ready_at).total_seconds(), 0.0)
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

    async def settle_voice(
        self, delivery_id: str, settled: Settled, *, write: bool, within_reply: bool = False
    ) -> None:
        """Spoken only on a clean mark; anything else is unheard (the policy retries it).

        A delivery attached to a reply (`within_reply`) that was cut is spoken when all of its
        words are in what the history keeps of that reply: saying it again would repeat it,
        and leaving it out would make the history claim words the record calls unheard.
        """
        for _ in range(_RETRIES):
            current = self._view.deliveries.get(delivery_id)
            if current is None or current.status is not DeliveryStatus.SENT:
                return
            heard = carried_heard(current.text, settled) if within_reply else settled.heard
            try:
                if heard:
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
        return sent_on_voice(found.entries if found is not None else [], state.delivery_id)

    async def _orphaned(self, state: DeliveryState) -> None:
        """Sent to a call this process does not hold: unheard once no call is alive."""
        if await self._live_calls(state.session_id):
            return
        dead = self._calls_of(state.session_id)
        for connection_id in dead:
            await self._write_lost(state.session_id, connection_id)
        reason = lost_reason(dead)
        current = self._view.deliveries.get(state.delivery_id)
        if current is not None and current.status is DeliveryStatus.SENT:
            await self._append(current, DeliveryUnheard(played_ms=0, reason=reason))

    def _calls_of(self, session_id: str) -> list[str]:
        session = self._view.session(session_id)
        connections = session.connections if session is not None else frozenset()
        return sorted(c for c in connections if c.startswith("call_"))

    async def _live_calls(self, session_id: str) -> bool:
        """Whether a call of the session is attached to a live surface (this one or not)."""
        calls = self._calls_of(session_id)
        if self.ownership is None or not self.ownership.ready:
            return bool(calls)
        for connection_id in calls:
            if await self.ownership.owner_of(connection_id) is not None:
                return True
        return False

    async def _record_lost_calls(self) -> None:
        """Calls still recorded attached whose surface died: record their end for them.

        Without it a session keeps a caller attached that nobody holds (and, if the call died
        mid-sentence, a caller speaking), so what it is owed waits for a turn instead of the
        caller's next call. A call is claimed before it is recorded attached, so an unclaimed
        one is a dead one.
        """
        if self.ownership is None or not self.ownership.ready:
            return
        for session_id, session in list(self._view.sessions.states.items()):
            local = self._calls.get(session_id) if self._calls is not None else None
            for connection_id in sorted(c for c in session.connections if c.startswith("call_")):
                if local is not None and local.connection_id == connection_id:
                    continue
                if await self.ownership.owner_of(connection_id) is None:
                    await self._write_lost(session_id, connection_id)

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
        await self._append_interaction(env, f"owner-lost-{connection_id}")

    # ------------------------------------------------------------------ several surfaces

    def watch(self, call: Call) -> None:
        """Say on `call` whatever is handed over for its session, whoever consumed it."""
        task = asyncio.create_task(self._watch(call))
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    async def _watch(self, call: Call) -> None:
        while not call.closed:
            for state in self._view.session_deliveries(call.session_id):
                if state.handed_off and state.delivery_id not in self._speaking:
                    try:
                        await self.execute(state.delivery_id)
                    except Exception:
                        log.exception("delivery %s: not executed", state.delivery_id)
            await self._view.wait_session_change(call.session_id, 1.0)

    async def sweep(self) -> int:
        """Settle deliveries left `sent` on calls nobody holds any more, then record the end of
        every dead call still attached; how many deliveries were looked at."""
        agent = self.agent
        stuck = [
            d.delivery_id for d in list(self._view.deliveries.states.values())
            if d.status is DeliveryStatus.SENT and d.delivery_id not in self._speaking
            and (self._sent_on_voice(d) or (agent is not None and agent.sent_on_agent(d)))
        ]
        for delivery_id in stuck:
            try:
                await self.execute(delivery_id)
            except Exception:
                log.exception("delivery %s: sweep failed", delivery_id)
        # After the deliveries: settling one records its dead call first, with the reason
        # (`call_lost`) that only a still-attached call can give.
        await self._record_lost_calls()
        return len(stuck)

    # ------------------------------------------------------------------ chat

    async def _send(self, state: DeliveryState) -> None:
        await self._append(state, sent_event(state, "chat"))
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((self._clock.now() - state.ready_at).total_seconds(), 0.0)
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
            if turn is None or self._clock.now() - turn[1] >= expiry:
                # The turn replied without it, or crashed: say it on its own.
                return False
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise TurnStillOpen(state.delivery_id)
            await self._view.wait_session_change(state.session_id, min(remaining, 1.0))

    async def write_message(self, state: DeliveryState) -> None:
        """The closing in history, once (the agent channel writes it on `spoken`)."""
        await self._write_message(state)

    async def append_interaction(self, env: Envelope[Any], msg_id: str) -> None:
        """An interaction event written once under `msg_id`."""
        await self._append_interaction(env, msg_id)

    async def append_delivery(self, state: DeliveryState, event: DeliveryEvent) -> int:
        """A delivery event with the delivery's expected sequence; its stream sequence."""
        return await self._append(state, event)

    async def _write_message(self, state: DeliveryState) -> None:
        env = delivery_envelope(
            state,
            TurnReplied(text=state.text),
            event_id=self._ids.new("ev"),
            now=self._clock.now(),
            agent=self._active_agent(state),
        )
        # One message per delivery even if two writers race inside the dedup window.
        await self._append_interaction(env, f"message-{state.delivery_id}")

    async def _append_interaction(self, env: Envelope[Any], msg_id: str) -> None:
        """An interaction event written once under `msg_id`, then seen by the view."""
        ack = await append(
            self._rt.jetstream,
            INTERACTION,
            self._rt.topology.session_subject(env.session_id),
            env,
            msg_id=msg_id,
            timings=self._rt.timings,
        )
        metrics.EVENTS_PUBLISHED.labels(stream="interaction").inc()
        if not ack.duplicate:
            await self._view.wait_applied(Context.INTERACTION, ack.seq)

    def _active_agent(self, state: DeliveryState) -> str | None:
        session = self._view.session(state.session_id)
        return session.agent if session is not None else state.agent

    async def _append(self, state: DeliveryState, event: DeliveryEvent) -> int:
        env = delivery_envelope(
            state,
            event,
            event_id=self._ids.new("ev"),
            now=self._clock.now(),
            agent=self._active_agent(state),
        )
        ack = await append(
            self._rt.jetstream,
            DELIVERIES,
            self._rt.topology.delivery_subject(state.session_id, state.delivery_id),
            env,
            expected_last_subject_seq=self._view.delivery_seq(state.delivery_id),
            timings=self._rt.timings,
        )
        metrics.EVENTS_PUBLISHED.labels(stream="deliveries").inc()
        await self._view.wait_applied(Context.DELIVERIES, ack.seq)
        return ack.seq
