"""The agent channel (docs/contract.md §6b): an external agent plays the part a phone call plays.

It reuses the call's events rather than inventing parallel ones:

- the agent opens `WS /v1/sessions/{id}/agent` → `channel.connected{agent, agent_<id>}`;
  it closes, is replaced, or its surface dies → `channel.disconnected` (`closed`,
  `replaced`, `owner_lost`);
- a closing handed to it → `delivery.sent{channel: agent, connection_id}` and a
  `delivery.say` frame whose `seq` is that event's stream sequence (so `after=SEQ` resumes
  on a number that survives restarts);
- ack `started` → `playback.started` (the gate holds other closings back meanwhile);
- ack `spoken` → the closing in history, `playback.finished{heard}`, `delivery.spoken`;
- ack `unheard` (+ `heard_text`) → the heard words in history (never the closing),
  `playback.finished{heard: false}`, `delivery.unheard`; the policy requeues the short text;
- ack `attached` → `delivery.attached` (if it was not pushed), the closing in history,
  `delivery.delivered`;
- signals `user_speaking` / `agent_speaking` → `speech.started|stopped` /
  `playback.started|finished`, exactly what a call's VAD and playback marks write.

Rule 7 holds because only a `spoken` ack writes `delivery.spoken`. A delivery left `sent` on a
connection that is gone (closed, replaced by a newer one of the session, or held by a surface
that died: its key in the calls bucket expired) goes back to pending through
`delivery.unheard` — `not_started` when the agent never said it began (requeued whole), else
`cut` (requeued short) — always after the connection's `channel.disconnected`, so the
policy never re-decides while it believes the agent attached. One agent connection per
session: the latest attachment wins, as for calls.

One module, past the usual size, because pushing, acknowledging and losing a connection
all read and write the same per-delivery send record (`send_info`): split, that invariant
would be spread over files.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from fastapi import WebSocket

from libs import metrics
from holdline.client.frames import DeliverySayFrame, Fact, ServerFrame, encode
from libs.bus import ConcurrencyConflict
from libs.domain import DeliveryState
from libs.domain.channel import not_allowed
from libs.domain.delivery import OPEN, DeliveryStatus
from libs.domain.delivery import envelope_for as delivery_envelope
from libs.domain.operation import OperationState
from libs.events import (
    ChannelConnected,
    ChannelDisconnected,
    DeliveryAttached,
    DeliveryDelivered,
    DeliverySent,
    DeliverySpoken,
    DeliveryUnheard,
    Envelope,
    PlaybackFinished,
    PlaybackStarted,
    SpeechStarted,
    SpeechStopped,
    TurnReplied,
)

from .session_locks import SessionLocks

if TYPE_CHECKING:
    from .api import Surface
    from .chat.deliveries import DeliveryExecutor
    from .projections import Entry
    from .voice.ownership import CallOwnership

log = logging.getLogger(__name__)

AckStatus = Literal["started", "spoken", "unheard", "attached"]
PREFIX = "agent_"
_RETRIES = 50
_SAID = frozenset({DeliveryStatus.SPOKEN, DeliveryStatus.DELIVERED})
_DROPPED = frozenset({DeliveryStatus.SUPPRESSED, DeliveryStatus.SUPERSEDED})
# WebSocket close codes: 4000 + the HTTP status it stands for.
CLOSE_REPLACED = 4409
CLOSE_GONE = 4404
# "Try again later": the client reconnects (and resumes) at once.
CLOSE_RECONNECT = 1013


class AckRefused(Exception):
    """An acknowledgement that contradicts the delivery's record; nothing was written."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


@dataclass(eq=False)
class AgentConnection:
    """One open agent WebSocket."""

    session_id: str
    connection_id: str
    websocket: WebSocket
    after: int = 0
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    watcher: asyncio.Task[None] | None = None

    async def send(self, frame: ServerFrame) -> bool:
        """Write one frame; False once the socket is gone."""
        if self.closed:
            return False
        async with self.lock:
            try:
                await self.websocket.send_text(encode(frame))
            except Exception:  # noqa: BLE001 - any failure means the peer is gone
                self.closed = True
                return False
        return True

    async def close(self, code: int, reason: str) -> None:
        """Close from the server side (replaced, session gone)."""
        self.closed = True
        with contextlib.suppress(Exception):
            await self.websocket.close(code=code, reason=reason)


@dataclass
class AgentRegistry:
    """The agent connections held by this process: the latest per session."""

    connections: dict[str, AgentConnection] = field(default_factory=dict)
    by_id: dict[str, AgentConnection] = field(default_factory=dict)

    def get(self, session_id: str) -> AgentConnection | None:
        """The live connection of a session, if this process holds it."""
        conn = self.connections.get(session_id)
        return conn if conn is not None and not conn.closed else None

    def held(self, connection_id: str) -> bool:
        """Whether this process holds that connection, open."""
        conn = self.by_id.get(connection_id)
        return conn is not None and not conn.closed

    def attach(self, conn: AgentConnection) -> None:
        """The connection starts carrying its session."""
        self.connections[conn.session_id] = conn
        self.by_id[conn.connection_id] = conn

    def detach(self, conn: AgentConnection) -> None:
        """The connection ended."""
        if self.connections.get(conn.session_id) is conn:
            del self.connections[conn.session_id]
        self.by_id.pop(conn.connection_id, None)


@dataclass(frozen=True, slots=True)
class SendInfo:
    """How a delivery was last handed to a channel, read from the session's log."""

    channel: str | None = None
    connection_id: str | None = None
    started: bool = False


def send_info(entries: list[Entry], delivery_id: str) -> SendInfo:
    """The last `delivery.sent`/`delivery.attached` of a delivery and whether it started."""
    info = SendInfo()
    for entry in entries:
        env = entry.envelope
        if env.delivery_id != delivery_id:
            continue
        event = env.event
        if isinstance(event, DeliverySent):
            info = SendInfo(event.channel, event.connection_id, False)
        elif isinstance(event, DeliveryAttached):
            info = SendInfo("attached", None, False)
        elif isinstance(event, PlaybackStarted) and info.channel == "agent":
            info = SendInfo(info.channel, info.connection_id, True)
    return info


def summary(op: OperationState) -> str:
    """One line naming what the operation did and how it ended (or where it stands)."""
    shown = ", ".join(
        f"{k}={v}" for k, v in sorted(op.arguments.items()) if not k.startswith("_")
    )
    line = f"{op.tool}({shown}): {op.status.value}"
    return f"{line}: {op.failure}" if op.failure else line


class AgentChannel:
    """Pushes handed-over deliveries to agents and records what their acks report."""

    def __init__(
        self,
        surface: Surface,
        *,
        executor: Callable[[], DeliveryExecutor],
        ownership: CallOwnership,
    ) -> None:
        self.surface = surface
        self.view = surface.view
        self._clock = surface.clock
        self._ids = surface.ids
        self.registry = AgentRegistry()
        # Looked up when used: the executor pushes to this channel (a cycle the composition
        # root closes with a late lookup). Ownership's bucket opens when voice starts.
        self._executor = executor
        self._ownership = ownership
        # One signal of a session at a time: each compares with the view its predecessor's
        # append already reached, so concurrent "started"/"stopped" cannot both be judged
        # against the same stale state (and one of them dropped).
        self._signal_locks = SessionLocks()

    # ------------------------------------------------------------------ queries

    def serves(self, session_id: str) -> bool:
        """The session talks through an external agent (it used the Agent API last)."""
        session = self.view.session(session_id)
        if session is None:
            return False
        return session.last_channel == "agent" or any(
            c.startswith(PREFIX) for c in session.connections
        )

    def sent_on_agent(self, state: DeliveryState) -> bool:
        """Pushed to an agent connection and not settled yet."""
        return self._info(state).channel == "agent"

    def _info(self, state: DeliveryState) -> SendInfo:
        found = self.view.log(state.session_id)
        return send_info(found.entries if found is not None else [], state.delivery_id)

    def facts(self, state: DeliveryState) -> list[Fact]:
        """What each operation of the closing came to, for the agent's own model."""
        facts: list[Fact] = []
        for operation_id in state.source_operation_ids:
            op = self.view.operations.get(operation_id)
            if op is not None:
                facts.append(
                    Fact(
                        operation_id=operation_id,
                        tool=op.tool,
                        status=op.status.value,
                        summary=summary(op),
                    )
                )
        return facts

    async def _alive(self, connection_id: str) -> bool:
        if self.registry.held(connection_id):
            return True
        if not self._ownership.ready:
            return False
        return await self._ownership.owner_of(connection_id) is not None

    def _exec(self) -> DeliveryExecutor:
        return self._executor()

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
        await self._not_said(state, "not_started: no agent connected")

    async def _push(self, state: DeliveryState, conn: AgentConnection) -> None:
        interrupt = state.decision == "interrupt"
        session = self.view.session(state.session_id)
        if not interrupt and session is not None and session.user_active:
            # The policy decided on a view without the user's latest speech: only an urgent
            # closing talks over the user (the call's rule).
            await self._not_said(state, "user_speaking", conn.connection_id)
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
                await self._not_said(state, f"not_started: {refused}", conn.connection_id)
                return
        sent = DeliverySent(
            mode="interrupt" if interrupt else "proactive",
            channel="agent",
            connection_id=conn.connection_id,
        )
        seq = await self._exec().append_delivery(state, sent)
        if state.ready_at is not None:
            metrics.DELIVERY_READY_TO_SENT.observe(
                max((self._clock.now() - state.ready_at).total_seconds(), 0.0)
            )
        frame = DeliverySayFrame(
            seq=seq,
            delivery_id=state.delivery_id,
            batch_id=state.batch_id,
            text=state.text,
            facts=self.facts(state),
            priority="urgent" if state.priority == "urgent" else "normal",
            interrupt=interrupt,
        )
        if not await conn.send(frame):
            current = self.view.deliveries.get(state.delivery_id)
            if current is not None and current.status is DeliveryStatus.SENT:
                await self._settle(current, "not_started: agent connection lost")

    async def _not_said(
        self, state: DeliveryState, reason: str, connection_id: str | None = None
    ) -> None:
        """Handed over but not pushed: recorded as sent and unheard, so the policy decides again."""
        executor = self._exec()
        await executor.append_delivery(
            state, DeliverySent(mode="proactive", channel="agent", connection_id=connection_id)
        )
        current = self.view.deliveries.get(state.delivery_id) or state
        await executor.append_delivery(current, DeliveryUnheard(played_ms=0, reason=reason))

    async def _settle(self, state: DeliveryState, reason: str | None = None) -> None:
        """A pushed delivery its connection can no longer confirm: back to pending."""
        info = self._info(state)
        if info.started:
            await self._playback(state, heard=False)
        code = reason or (
            "cut: agent connection lost" if info.started else "not_started: agent connection lost"
        )
        await self._exec().append_delivery(state, DeliveryUnheard(played_ms=0, reason=code))

    async def orphaned(self, state: DeliveryState) -> None:
        """Sent on an agent connection: settle it once that connection is gone everywhere."""
        info = self._info(state)
        connection_id = info.connection_id
        if connection_id is None:
            return  # taken over HTTP with no connection: that agent owes its spoken/unheard
        if await self._alive(connection_id):
            return
        await self._record_gone(state.session_id, connection_id, "owner_lost")
        current = self.view.deliveries.get(state.delivery_id)
        if current is not None and current.status is DeliveryStatus.SENT:
            await self._settle(current)

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
        conn.watcher = asyncio.create_task(self._watch(conn))

    async def disconnect(self, conn: AgentConnection, reason: str = "closed") -> None:
        """The socket ended: record it, then return what it left unconfirmed to pending."""
        conn.closed = True
        self.registry.detach(conn)
        if conn.watcher is not None and conn.watcher is not asyncio.current_task():
            conn.watcher.cancel()
        await self._ownership.release(conn.connection_id)
        await self.gone(conn.session_id, conn.connection_id, reason)

    async def gone(self, session_id: str, connection_id: str, reason: str) -> None:
        """`channel.disconnected` first, then every delivery it left `sent` back to pending."""
        await self._record_gone(session_id, connection_id, reason)
        for state in self.view.session_deliveries(session_id):
            if state.status is not DeliveryStatus.SENT:
                continue
            info = self._info(state)
            if info.channel == "agent" and info.connection_id == connection_id:
                await self._retrying(self._settle, state.delivery_id)

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
        await self._exec().append_interaction(env, f"agent-gone-{connection_id}")

    def _gone_reason(self, session_id: str, connection_id: str) -> str | None:
        found = self.view.log(session_id)
        for entry in reversed(found.entries if found is not None else []):
            event = entry.envelope.event
            if isinstance(event, ChannelDisconnected) and event.connection_id == connection_id:
                return event.reason
        return None

    async def _retrying(self, step: Callable[[DeliveryState], Any], delivery_id: str) -> None:
        for _ in range(_RETRIES):
            state = self.view.deliveries.get(delivery_id)
            if state is None or state.status is not DeliveryStatus.SENT:
                return
            try:
                await step(state)
            except ConcurrencyConflict:
                await self.view.sync()
            else:
                return

    async def _watch(self, conn: AgentConnection) -> None:
        """Push what is handed over for the session whoever consumed it; notice replacement."""
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
            for state in self.view.session_deliveries(session_id):
                if state.handed_off:
                    try:
                        await self._exec().execute(state.delivery_id)
                    except Exception:
                        log.exception("delivery %s: not pushed", state.delivery_id)
            await self.view.wait_session_change(session_id, 1.0)

    # ------------------------------------------------------------------ signals

    async def signal(
        self, session_id: str, user_speaking: bool | None, agent_speaking: bool | None
    ) -> None:
        """The agent's view of the two clocks, as the call's VAD and playback would say it."""
        async with self._signal_locks.hold(session_id):
            await self._signal(session_id, user_speaking, agent_speaking)

    async def _signal(
        self, session_id: str, user_speaking: bool | None, agent_speaking: bool | None
    ) -> None:
        session = self.view.session(session_id)
        agent = session.agent if session else None
        if user_speaking is not None and (session is None or session.user_active != user_speaking):
            event: Any = SpeechStarted(stream_ms=0) if user_speaking else SpeechStopped(stream_ms=0)
            await self.surface.append_interaction(session_id, event, expect=False, agent=agent)
        if agent_speaking is not None and (
            session is None or session.playback_active != agent_speaking
        ):
            playback: Any = (
                PlaybackStarted(text="", duration_ms=0)
                if agent_speaking
                else PlaybackFinished(heard=True, played_ms=0)
            )
            await self.surface.append_interaction(session_id, playback, expect=False, agent=agent)

    # ------------------------------------------------------------------ acknowledgements

    async def ack(
        self,
        session_id: str,
        delivery_id: str,
        status: AckStatus,
        *,
        heard_text: str | None = None,
        turn_id: str | None = None,
        connection_id: str | None = None,
    ) -> str:
        """Record one acknowledgement (idempotent); the delivery's status afterwards."""
        for _ in range(_RETRIES):
            state = self.view.deliveries.get(delivery_id)
            if state is None or state.session_id != session_id:
                raise AckRefused(404, "unknown_delivery", f"no delivery {delivery_id} here")
            try:
                await self._apply_ack(state, status, heard_text, turn_id, connection_id)
            except ConcurrencyConflict:
                await self.view.sync()
                continue
            current = self.view.deliveries.get(delivery_id) or state
            return current.status.value
        raise AckRefused(409, "conflict", "the delivery is changing too fast; retry")

    async def _apply_ack(
        self,
        state: DeliveryState,
        status: AckStatus,
        heard_text: str | None,
        turn_id: str | None,
        connection_id: str | None,
    ) -> None:
        if state.status in _DROPPED:
            raise AckRefused(
                409, "delivery_closed",
                f"delivery {state.delivery_id} is {state.status.value}: {state.reason or ''}",
            )
        if status == "unheard" and state.status in _SAID:
            raise AckRefused(
                409, "already_said",
                f"delivery {state.delivery_id} is already {state.status.value}; it cannot be "
                "unheard",
            )
        if state.status in _SAID:
            return  # spoken after spoken, started after spoken, ...: nothing new
        if status == "unheard" and state.status in OPEN:
            return  # already back to pending
        if status == "attached":
            await self._attached(state, turn_id)
            return
        if state.status in OPEN:
            # The agent says it is speaking a delivery it was not (or no longer) pushed:
            # its word is the playback truth, so it is sent to it first (to its live
            # connection when the ack came over HTTP, so losing that settles it too).
            held = self.registry.get(state.session_id)
            if connection_id is None and held is not None:
                connection_id = held.connection_id
            sent = DeliverySent(mode="proactive", channel="agent", connection_id=connection_id)
            await self._exec().append_delivery(state, sent)
            state = self.view.deliveries.get(state.delivery_id) or state
        info = self._info(state)
        if status == "started":
            if not info.started:
                await self._playback(state, heard=None)
            return
        if status == "spoken":
            if info.started:
                await self._playback(state, heard=True)
            await self._exec().write_message(state)
            state = self.view.deliveries.get(state.delivery_id) or state
            await self._exec().append_delivery(state, DeliverySpoken())
            metrics.DELIVERIES.labels(mode=state.mode or "proactive", channel="agent").inc()
            return
        # unheard, while sent
        heard = (heard_text or "").strip()
        if heard:
            await self._heard_part(state, heard)
        if info.started:
            await self._playback(state, heard=False)
        reason = "cut: agent reported it unheard" if info.started or heard else (
            "not_started: agent reported it unheard"
        )
        state = self.view.deliveries.get(state.delivery_id) or state
        await self._exec().append_delivery(state, DeliveryUnheard(played_ms=0, reason=reason))

    async def _attached(self, state: DeliveryState, turn_id: str | None) -> None:
        executor = self._exec()
        if state.status in OPEN:
            attached = DeliveryAttached(attached_to_turn_id=turn_id or f"agent-{state.delivery_id}")
            await executor.append_delivery(state, attached)
            state = self.view.deliveries.get(state.delivery_id) or state
        elif self._info(state).started:
            await self._playback(state, heard=False)
        await executor.write_message(state)
        state = self.view.deliveries.get(state.delivery_id) or state
        if state.status is DeliveryStatus.SENT:
            await executor.append_delivery(state, DeliveryDelivered())
            metrics.DELIVERIES.labels(mode="next_turn", channel="agent").inc()

    async def _playback(self, state: DeliveryState, *, heard: bool | None) -> None:
        """`playback.started` (heard None) or `.finished` for the delivery's current send."""
        event: Any = (
            PlaybackStarted(text=state.text, duration_ms=0)
            if heard is None
            else PlaybackFinished(heard=heard, played_ms=0)
        )
        kind = "started" if heard is None else "finished"
        env = delivery_envelope(state, event, event_id=self._ids.new("ev"), now=self._clock.now())
        await self._exec().append_interaction(
            env, f"agent-{kind}-{state.delivery_id}-{state.attempts}"
        )

    async def _heard_part(self, state: DeliveryState, heard: str) -> None:
        """What the user heard of a cut closing: history keeps those words, not the closing."""
        env = delivery_envelope(
            state, TurnReplied(text=heard), event_id=self._ids.new("ev"), now=self._clock.now(),
            carries=False,
        )
        await self._exec().append_interaction(
            env, f"heard-{state.delivery_id}-{state.attempts}"
        )
