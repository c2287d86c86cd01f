"""The surface's live view: every session's events from the five event streams, folded
(one session's log: `session_log.py`).

One ordered consumer per stream follows it from the start (the operations follower also
feeds admission's `LoadView`, so that stream reaches the process once), so any surface
process can answer for any session: snapshots, timelines, WebSocket resumes and turns read
memory, and a restart rebuilds everything by replay.

Read-your-writes: a writer waits until the view applied the sequence the broker gave its
append (`wait_applied`), and readers that must see everything appended so far call
`sync()`, a barrier on every stream's last sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from libs.bus import EVENT_CODECS, Context, Topology, position, stream_last_seq
from libs.domain import (
    BatchState,
    DeliveryState,
    OperationState,
    Projection,
    SessionState,
    batch,
    delivery,
    operation,
    session,
)
from libs.domain.batch import MemberStatus
from libs.events import (
    AgentHandedOff,
    Envelope,
    EventDecodeError,
    SessionClosed,
    SessionOpened,
    TurnReceived,
    TurnReplied,
)
from libs.tools.labels import label_of

from .eviction import EvictedSessions, read_history
from .session_log import (
    ERASED,
    STREAM_INDEX,
    STREAMS,
    Entry,
    Listener,
    SessionLog,
)

log = logging.getLogger(__name__)


def _op_key(env: Envelope[Any]) -> str:
    return env.operation_id or ""


def _batch_key(env: Envelope[Any]) -> str:
    return env.batch_id or ""


def _delivery_key(env: Envelope[Any]) -> str:
    return env.delivery_id or ""


def _session_key(env: Envelope[Any]) -> str:
    return env.session_id


class SurfaceView:
    """Live projections of every session, fed by ordered consumers over the event streams."""

    def __init__(self, label: Callable[[str, Mapping[str, Any]], str] | None = None) -> None:
        # Words for an operation, from its tool's declaration (the registry's, given by the
        # composition root); without one, the arguments' own words.
        self.label: Callable[[str, Mapping[str, Any]], str] = label or (
            lambda _tool, args: label_of(None, args)
        )
        self.sessions: Projection[SessionState, Any] = Projection(session.evolve, _session_key)
        self.operations: Projection[OperationState, Any] = Projection(operation.evolve, _op_key)
        # Each operation's first terminal status: how it settled its batch, shown before the
        # batch's own log records it at the closing.
        self.terminal: dict[str, MemberStatus] = {}
        self.batches: Projection[BatchState, Any] = Projection(batch.evolve, _batch_key)
        self.deliveries: Projection[DeliveryState, Any] = Projection(
            delivery.evolve, _delivery_key
        )
        self.logs: dict[str, SessionLog] = {}
        self.applied: dict[Context, int] = dict.fromkeys(STREAMS, 0)
        self._waiters: dict[Context, list[tuple[int, int, asyncio.Future[None]]]] = {
            c: [] for c in STREAMS
        }
        self._tickets = itertools.count()
        self._subs: list[Subscription] = []
        self._js: JetStreamContext | None = None
        self._topology: Topology | None = None
        self.caught_up = asyncio.Event()
        # Other folds of the operations stream in this process (admission's `LoadView`):
        # fed from this view's follower, so the stream is delivered and decoded once.
        self.operation_feeds: list[Callable[[Envelope[Any], int], None]] = []
        # Sessions evicted from memory (core/eviction.py), their events held until restored.
        self.evicted = EvictedSessions()

    # ------------------------------------------------------------------ reads

    def log(self, session_id: str) -> SessionLog | None:
        """A session's log, if any event of it was seen."""
        return self.logs.get(session_id)

    def session(self, session_id: str) -> SessionState | None:
        """A session's state, once `session.opened` was applied."""
        return self.sessions.get(session_id)

    def session_operations(self, session_id: str) -> list[OperationState]:
        """The session's operations, in admission order."""
        found = self.logs.get(session_id)
        if found is None:
            return []
        return [s for o in found.operation_ids if (s := self.operations.get(o)) is not None]

    def session_batches(self, session_id: str) -> list[BatchState]:
        """The session's batches, in opening order."""
        found = self.logs.get(session_id)
        if found is None:
            return []
        return [
            batch.as_settled_so_far(s, self.terminal)
            for b in found.batch_ids
            if (s := self.batches.get(b)) is not None
        ]

    def session_deliveries(self, session_id: str) -> list[DeliveryState]:
        """The session's deliveries, in order of readiness."""
        found = self.logs.get(session_id)
        if found is None:
            return []
        return [s for d in found.delivery_ids if (s := self.deliveries.get(d)) is not None]

    def delivery_seq(self, delivery_id: str) -> int:
        """The last sequence seen on a delivery's subject (for expected-sequence appends)."""
        return self.deliveries.last_seq.get(delivery_id, 0)

    # ------------------------------------------------------------------ waiting

    async def wait_applied(self, context: Context, seq: int, timeout_s: float = 5.0) -> None:
        """Until this process has applied a stream up to `seq` (its own append, usually)."""
        if self.applied[context] >= seq:
            return
        # One future per waiter, resolved in sequence order: no herd of wake-ups per event.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters[context], (seq, next(self._tickets), future))
        try:
            await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            raise TimeoutError(f"{context.value} not applied up to {seq}") from None

    async def sync(
        self, timeout_s: float = 5.0, contexts: tuple[Context, ...] = STREAMS
    ) -> None:
        """A barrier: every event appended to these streams (all by default) before this call
        is applied after it. A caller that only re-reads one stream's state names that stream:
        it then waits for that stream alone, not behind every other stream's backlog."""
        if self._js is None or self._topology is None:
            return
        js, topology = self._js, self._topology
        lasts = await asyncio.gather(
            *(stream_last_seq(js, topology.stream_name(c), timeout_s=timeout_s) for c in contexts)
        )
        for context, last in zip(contexts, lasts, strict=True):
            await self.wait_applied(context, last, timeout_s)

    async def wait_session_change(self, session_id: str, timeout_s: float) -> None:
        """Until any new event of the session is applied, or the timeout passes."""
        found = self._log_for(session_id)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(found.changed.wait(), timeout_s)

    def subscribe(self, session_id: str, listener: Listener) -> SessionLog:
        """Call `listener` for every entry applied from now on; returns the log so far.

        No await between reading the log and registering, so nothing falls in between.
        """
        found = self._log_for(session_id)
        found.listeners.add(listener)
        return found

    def unsubscribe(self, session_id: str, listener: Listener) -> None:
        """Stop calling a listener."""
        found = self.logs.get(session_id)
        if found is not None:
            found.listeners.discard(listener)

    # ------------------------------------------------------------------ applying

    def _log_for(self, session_id: str) -> SessionLog:
        found = self.logs.get(session_id)
        if found is None:
            found = self.logs[session_id] = SessionLog(session_id)
        return found

    def apply(self, context: Context, env: Envelope[Any], seq: int) -> None:
        """Fold one event into the projections and the session's log, then notify."""
        if self.evicted and env.session_id in self.evicted:
            self.evicted.hold((context, env, seq), self.restore)
            return
        found = self._log_for(env.session_id)
        found.touched = time.monotonic()
        index = STREAM_INDEX[context]
        if seq <= found.high[index]:
            return
        found.high[index] = seq
        match context:
            case Context.INTERACTION:
                self._apply_interaction(found, env, seq)
            case Context.OPERATIONS:
                if env.operation_id and env.operation_id not in self.operations.states:
                    found.operation_ids.append(env.operation_id)
                self.operations.apply(env, seq)
                status = batch.member_status(env.event)
                if status is not None and env.operation_id:
                    self.terminal.setdefault(env.operation_id, status)
            case Context.BATCHES:
                if env.batch_id and env.batch_id not in self.batches.states:
                    found.batch_ids.append(env.batch_id)
                self.batches.apply(env, seq)
            case Context.DELIVERIES:
                if env.delivery_id and env.delivery_id not in self.deliveries.states:
                    found.delivery_ids.append(env.delivery_id)
                self.deliveries.apply(env, seq)
            case _:
                pass
        entry = Entry(stream=context, seq=seq, envelope=env, cursor=tuple(found.high))
        if not (found.erased and context is Context.INTERACTION):
            found.entries.append(entry)
        for listener in list(found.listeners):
            try:
                listener(entry)
            except Exception:
                log.exception("listener of session %s failed", env.session_id)
        found.changed.set()
        found.changed = asyncio.Event()

    def _apply_interaction(self, found: SessionLog, env: Envelope[Any], seq: int) -> None:
        state = self.sessions.apply(env, seq)
        event = env.event
        if isinstance(event, TurnReceived):
            found.open_turn = (env.turn_id or "", env.occurred_at)
            if event.client_turn_id is not None and env.turn_id:
                found.client_turns[event.client_turn_id] = env.turn_id
                found.turn_channels[env.turn_id] = event.channel
        elif isinstance(event, TurnReplied):
            # A repeat of a client turn id is answered from the turn's own reply (the one
            # with a response id). A closing said later is written under the turn that
            # opened its batch; it must not replace that reply.
            if env.turn_id in found.turn_channels and env.response_id is not None:
                found.replies.setdefault(env.turn_id or "", env)
            found.written.update(event.attached_delivery_ids)
            if env.delivery_id:
                found.written.add(env.delivery_id)
            if found.open_turn is not None and env.turn_id == found.open_turn[0]:
                found.open_turn = None
        elif isinstance(event, AgentHandedOff) and event.context == "fresh":
            found.context_from = len(state.messages) if state is not None else 0
        elif isinstance(event, SessionOpened):
            found.opened_at = env.occurred_at
        elif isinstance(event, SessionClosed) and event.reason == ERASED:
            self._erase(found)

    def _erase(self, found: SessionLog) -> None:
        # The session is gone for every reader: no state, no texts, no token to match.
        found.erased = True
        self.sessions.states.pop(found.session_id, None)
        found.entries = [e for e in found.entries if e.stream is not Context.INTERACTION]
        found.client_turns.clear()
        found.turn_channels.clear()
        found.replies.clear()

    async def restore(self, session_id: str) -> None:
        """Bring an evicted session back from the streams (core/eviction.py); a no-op for a
        session in memory. Concurrent callers share one restore."""
        if self._js is None or self._topology is None:
            return
        js, topology = self._js, self._topology
        await self.evicted.restore(
            session_id, lambda: read_history(js, topology, session_id), self.apply
        )

    def receive(self, context: Context, env: Envelope[Any], seq: int) -> None:
        """One event of a stream, in order: folded (`apply`), and the stream applied up to it
        (`wait_applied` returns), as a follower does with each message; a fast test's
        in-memory store feeds the view through it."""
        self.apply(context, env, seq)
        self._advance(context, seq)

    def _advance(self, context: Context, seq: int) -> None:
        if seq <= self.applied[context]:
            return
        self.applied[context] = seq
        waiters = self._waiters[context]
        while waiters and waiters[0][0] <= seq:
            _, _, future = heapq.heappop(waiters)
            if not future.done():
                future.set_result(None)

    async def follow(
        self, js: JetStreamContext, topology: Topology, *, heartbeat_s: float = 0.5
    ) -> None:
        """Follow every stream from its start; `caught_up` is set once all reach today's end."""
        self._js, self._topology = js, topology
        pending: set[Context] = set()
        targets: dict[Context, int] = {}
        for context in STREAMS:
            info = await js.stream_info(topology.stream_name(context))
            targets[context] = int(info.state.last_seq or 0)
            if info.state.messages:
                pending.add(context)
            else:
                # Empty, or every message purged (an erasure): nothing to wait for.
                self._advance(context, targets[context])
        if not pending:
            self.caught_up.set()
        for context in STREAMS:
            self._subs.append(
                await js.subscribe(
                    topology.context_filter(context),
                    stream=topology.stream_name(context),
                    ordered_consumer=True,
                    idle_heartbeat=heartbeat_s,
                    deliver_policy=DeliverPolicy.ALL,
                    cb=self._handler(context, targets[context], pending),
                )
            )

    def _handler(
        self, context: Context, target: int, pending: set[Context]
    ) -> Callable[[Msg], Any]:
        codec = EVENT_CODECS[context]
        feeds = self.operation_feeds if context is Context.OPERATIONS else []

        async def on_msg(msg: Msg) -> None:
            where = position(msg.reply)
            seq = where.stream_seq
            try:
                env = codec.decode(msg.data)
            except EventDecodeError as exc:
                log.warning("view skipped undecodable %s event %d: %s", context, seq, exc.reason)
            else:
                self.apply(context, env, seq)
                if feeds:
                    for feed in feeds:
                        feed(env, seq)
            # Nothing stored after it: the stream's later sequences up to the target were
            # purged (an erasure), so the stream is applied up to the target.
            self._advance(context, target if where.num_pending == 0 and seq < target else seq)
            if (seq >= target or where.num_pending == 0) and context in pending:
                pending.discard(context)
                if not pending:
                    self.caught_up.set()

        return on_msg

    async def close(self) -> None:
        """Stop following the streams."""
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()
