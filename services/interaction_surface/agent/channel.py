"""The agent channel (docs/contract.md §6b): an external agent plays the part a phone call
plays, as one of the delivery executor's channels (`delivery/channel.py`).

It reuses the call's events rather than inventing parallel ones:

- the agent opens `WS /v1/sessions/{id}/agent` → `channel.connected{agent, agent_<id>}`;
  it closes, is replaced, or its surface dies → `channel.disconnected` (`closed`,
  `replaced`, `owner_lost`);
- a closing handed to it → `delivery.sent{channel: agent, connection_id}` and a
  `delivery.say` frame whose `seq` is that event's stream sequence (so `after=SEQ` resumes
  on a number that survives restarts);
- its acknowledgements and signals are recorded by `acks.py`, as a call's marks would be.

A delivery left `sent` on a connection that is gone (closed, replaced by a newer one of the
session, or held by a surface that died: its key in the calls bucket expired) goes back to
pending through `delivery.unheard` — `not_started` when the agent never said it began
(requeued whole), else `cut` (requeued short) — always after the connection's
`channel.disconnected`, so the policy never re-decides while it believes the agent
attached. One agent connection per session: the latest attachment wins, as for calls.
"""

from __future__ import annotations

import asyncio
import contextlib

from holdline.client.frames import DeliverySayFrame
from libs import metrics
from libs.bus import TooManyConflicts
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.domain.relevance import not_allowed
from libs.events import ChannelConnected, ChannelDisconnected, DeliverySent, Envelope

from ..core.surface import Surface
from ..core.writes import SurfaceWrites
from ..delivery.routing import Reach
from ..voice.ownership import CallOwnership
from .connections import (
    CLOSE_GONE,
    CLOSE_RECONNECT,
    CLOSE_REPLACED,
    PREFIX,
    AgentConnection,
    AgentRegistry,
)
from .records import AgentRecords


class AgentChannel:
    """Pushes handed-over deliveries to agents and settles what their connections left."""

    def __init__(
        self,
        surface: Surface,
        writes: SurfaceWrites,
        records: AgentRecords,
        registry: AgentRegistry,
        *,
        ownership: CallOwnership,
    ) -> None:
        self.surface = surface
        self.view = surface.view
        self._clock = surface.clock
        self._ids = surface.ids
        self._writes = writes
        self._records = records
        self.registry = registry
        # Agent connections are owned in the calls' bucket (same owner, same owner-lost
        # sweep); it opens when voice starts.
        self._ownership = ownership

    # ------------------------------------------------------------------ the Channel protocol

    def busy(self, delivery_id: str) -> bool:
        """Nothing is held in this process while an agent speaks: its acks settle it."""
        return False

    async def reach(self, state: DeliveryState) -> Reach:
        """The session talks through an external agent: pushed to it, or back to pending."""
        return Reach.TAKES if self.serves(state.session_id) else Reach.ABSENT

    def holds_sent(self, state: DeliveryState) -> bool:
        """Pushed to an agent connection and not settled yet."""
        return self._records.info(state).channel == "agent"

    def strandable(self, state: DeliveryState) -> bool:
        """Whatever an agent connection left `sent`: its surface may have died."""
        return self.holds_sent(state)

    async def sweep(self) -> None:
        """Dead agent connections are recorded as their deliveries are settled."""

    def serves(self, session_id: str) -> bool:
        """The session talks through an external agent (it used the Agent API last)."""
        session = self.view.session(session_id)
        if session is None:
            return False
        return session.last_channel == "agent" or any(
            c.startswith(PREFIX) for c in session.connections
        )

    async def _alive(self, connection_id: str) -> bool:
        if self.registry.held(connection_id):
            return True
        if not self._ownership.ready:
            return False
        return await self._ownership.owner_of(connection_id) is not None

    # ------------------------------------------------------------------ handing over

    async def hand_over(self, state: DeliveryState) -> None:
        """A closing the policy wants said now: push it, or give it back to pending."""
        conn = self.registry.get(state.session_id)
        if conn is not None:
            await self._push(state, conn)
            return
        session = self.view.session(state.session_id)
        others = [c for c in (session.connections if session else ()) if c.startswith(PREFIX)]
        for connection_id in others:
            if await self._alive(connection_id):
                return  # the surface holding it pushes it (its watcher)
        # Its surface died: record the loss first, so the policy stops deciding for an agent
        # it believes attached, then give the closing back (`not_started` uses no retry).
        for connection_id in others:
            await self._record_gone(state.session_id, connection_id, "owner_lost")
        await self._records.not_said(state, "not_started: no agent connected")

    async def _push(self, state: DeliveryState, conn: AgentConnection) -> None:
        interrupt = state.decision == "interrupt"
        session = self.view.session(state.session_id)
        if not interrupt and session is not None and session.user_active:
            # The policy decided on a view without the user's latest speech: only an urgent
            # closing talks over the user (the call's rule).
            await self._records.not_said(state, "user_speaking", conn.connection_id)
            return
        if session is not None:
            # Nor on a view without a handoff this surface has recorded since: a result the
            # agent handed off from owns is not the new agent's to say. Given back unsaid,
            # the policy decides again and, its channel caught up, suppresses it.
            sources = [
                found
                for operation_id in state.source_operation_ids
                if (found := self.view.operations.get(operation_id)) is not None
            ]
            refused = not_allowed(sources, session.agent)
            if refused is not None:
                await self._records.not_said(state, f"not_started: {refused}", conn.connection_id)
                return
        sent = DeliverySent(
            mode="interrupt" if interrupt else "proactive",
            channel="agent",
            connection_id=conn.connection_id,
        )
        seq = await self._writes.delivery(state, sent)
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((self._clock.now() - state.ready_at).total_seconds(), 0.0)
            )
        frame = DeliverySayFrame(
            seq=seq,
            delivery_id=state.delivery_id,
            batch_id=state.batch_id,
            text=state.text,
            facts=self._records.facts(state),
            priority="urgent" if state.priority == "urgent" else "normal",
            interrupt=interrupt,
        )
        if not await conn.send(frame):
            current = self.view.deliveries.get(state.delivery_id)
            if current is not None and current.status is DeliveryStatus.SENT:
                await self._records.give_back(current, "not_started: agent connection lost")

    async def settle(self, state: DeliveryState) -> None:
        """Sent on an agent connection: settle it once that connection is gone everywhere."""
        info = self._records.info(state)
        connection_id = info.connection_id
        if connection_id is None:
            return  # taken over HTTP with no connection: that agent owes its spoken/unheard
        if await self._alive(connection_id):
            return
        await self._record_gone(state.session_id, connection_id, "owner_lost")
        current = self.view.deliveries.get(state.delivery_id)
        if current is not None and current.status is DeliveryStatus.SENT:
            await self._records.give_back(current)

    # ------------------------------------------------------------------ connections

    async def connect(self, conn: AgentConnection) -> None:
        """Record the connection (replacing older ones of the session) and start serving it."""
        session_id = conn.session_id
        session = self.view.session(session_id)
        older = sorted(
            c for c in (session.connections if session else ()) if c.startswith(PREFIX)
        )
        for connection_id in older:
            local = self.registry.by_id.get(connection_id)
            if local is not None:
                self.registry.detach(local)
                await local.close(CLOSE_REPLACED, "replaced by a newer agent connection")
            await self.gone(session_id, connection_id, "replaced")
        # Held (here and in the shared bucket) before anyone can see it attached, so another
        # surface that picks a closing up finds it alive and leaves it to this one.
        self.registry.attach(conn)
        await self._ownership.claim(conn.connection_id)
        await self.surface.append_interaction(
            session_id,
            ChannelConnected(channel="agent", connection_id=conn.connection_id),
            expect=False,
            agent=session.agent if session else None,
        )
        conn.tasks.append(asyncio.create_task(self._guard(conn)))

    async def disconnect(self, conn: AgentConnection, reason: str = "closed") -> None:
        """The socket ended: record it, then return what it left unconfirmed to pending."""
        conn.closed = True
        self.registry.detach(conn)
        for task in conn.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        await self._ownership.release(conn.connection_id)
        await self.gone(conn.session_id, conn.connection_id, reason)

    async def gone(self, session_id: str, connection_id: str, reason: str) -> None:
        """`channel.disconnected` first, then every delivery it left `sent` back to pending."""
        await self._record_gone(session_id, connection_id, reason)
        for state in self.view.session_deliveries(session_id):
            if state.status is not DeliveryStatus.SENT:
                continue
            info = self._records.info(state)
            if info.channel == "agent" and info.connection_id == connection_id:
                await self._give_back(state.delivery_id)

    async def _record_gone(self, session_id: str, connection_id: str, reason: str) -> None:
        session = self.view.session(session_id)
        if session is None or connection_id not in session.connections:
            return
        env = Envelope(
            event_id=self._ids.new("ev"),
            occurred_at=self._clock.now(),
            session_id=session_id,
            agent=session.agent,
            event=ChannelDisconnected(channel="agent", connection_id=connection_id, reason=reason),
        )
        # Several writers may notice the same loss (its socket, a newer connection, a sweep).
        await self._writes.record(env, f"agent-gone-{connection_id}")

    def _gone_reason(self, session_id: str, connection_id: str) -> str | None:
        found = self.view.log(session_id)
        for entry in reversed(found.entries if found is not None else []):
            event = entry.envelope.event
            if isinstance(event, ChannelDisconnected) and event.connection_id == connection_id:
                return event.reason
        return None

    async def _guard(self, conn: AgentConnection) -> None:
        """Close the socket once its session closes or a newer connection replaces it."""
        session_id = conn.session_id
        while not conn.closed:
            session = self.view.session(session_id)
            if session is None or session.closed:
                await conn.close(CLOSE_GONE, "the session is closed")
                return
            if conn.connection_id not in session.connections:
                # Replaced by a newer connection: that one serves the session. Recorded lost
                # by another surface (this one looked dead): the agent should come back.
                if self._gone_reason(session_id, conn.connection_id) == "replaced":
                    await conn.close(CLOSE_REPLACED, "replaced by a newer agent connection")
                else:
                    await conn.close(CLOSE_RECONNECT, "reconnect: this connection was given up")
                return
            await self.view.wait_session_change(session_id, 1.0)

    async def _give_back(self, delivery_id: str) -> None:
        """A delivery the lost connection left `sent`: back to pending, read again on a race."""

        async def attempt() -> None:
            current = self.view.deliveries.get(delivery_id)
            if current is not None and current.status is DeliveryStatus.SENT:
                await self._records.give_back(current)

        with contextlib.suppress(TooManyConflicts):
            await self._writes.retrying(f"delivery {delivery_id}", attempt)
