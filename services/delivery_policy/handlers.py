"""The gate's shell: fold events, ask the pure decider, append with expected sequence.

Every change of a session (a channel event, a newer intent, a new or unheard delivery)
re-evaluates that session's open deliveries; a timer does the same when a quiet window or
a wait limit runs out. Timers are derived from persisted events (the delivery's ready time,
the moment the user stopped), so a restart re-arms them by re-evaluating everything open.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import datetime, timedelta

from libs.bus import (
    CONFLICT_RETRY,
    ConflictRetry,
    ConnectedEventStore,
    Context,
    EventStore,
    Received,
    Repository,
    aggregates,
    replay_owned,
)
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.crash import pause_point
from libs.domain.delivery import DeliveryState
from libs.domain.delivery import envelope_for as delivery_envelope
from libs.domain.delivery_gate import decide_delivery
from libs.events import (
    DELIVERIES,
    INTERACTION,
    OPERATIONS,
    DeliveryEvent,
    DeliveryReady,
    DeliveryUnheard,
    Envelope,
    InteractionEvent,
    OperationAdmitted,
    OperationCompensated,
    OperationEvent,
)
from libs.metrics import (
    DELIVERY_READY_TO_DECISION,
    NEXT_TURN_RESYNCS,
    STALE_DELIVERIES,
)
from libs.service import Runtime

from .domain import GateProjections
from .settings import Settings

log = logging.getLogger(__name__)

_RETRY_AFTER = timedelta(seconds=1)


class Gate:
    """The ActivityGate of every session this process serves."""

    def __init__(
        self,
        runtime: Runtime,
        settings: Settings,
        *,
        store: EventStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = RANDOM_IDS,
        retry: ConflictRetry = CONFLICT_RETRY,
    ) -> None:
        self._rt = runtime
        # The broker's store (read once connected) unless one is given (fast tests).
        self._events: EventStore = store if store is not None else ConnectedEventStore(runtime)
        # Every write goes through it; a losing decision is made again under the one policy.
        self._deliveries = Repository(
            self._events, aggregates.deliveries(runtime.topology), clock=clock, ids=ids,
            retry=retry,
        )
        self._clock = clock
        self._ids = ids
        self._policy = settings.policy
        self._partition = settings.partition
        self.state = GateProjections()
        self.hydrated = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # Events folded whose deciding has not finished. A handler run again in place while
        # the broker was unavailable (`Consumer._patiently`) finds its event folded already
        # and must still decide, or a closing waits for ever.
        self._undecided: set[str] = set()

    # ------------------------------------------------------------------ start-up

    async def hydrate(self) -> None:
        """Rebuild every projection from the streams, then decide everything still open."""
        js = self._rt.jetstream
        topo = self._rt.topology
        owns = self._partition.owns
        await replay_owned(
            js, topo, Context.INTERACTION, INTERACTION,
            owns=owns, apply=self.state.apply_interaction,
        )
        await replay_owned(
            js, topo, Context.OPERATIONS, OPERATIONS, owns=owns, apply=self.state.apply_operation
        )
        await replay_owned(
            js, topo, Context.DELIVERIES, DELIVERIES, owns=owns, apply=self.state.apply_delivery
        )
        self.hydrated.set()
        sessions = list(self.state.sessions_with_open_deliveries())
        log.info("rebuilt gate state; %d sessions are owed a delivery", len(sessions))
        for session_id in sessions:
            await self.evaluate_session(session_id, cause=None)

    async def stop(self) -> None:
        """Cancel timers and in-flight re-evaluations."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    # ------------------------------------------------------------------ handlers

    async def on_interaction(self, received: Received[InteractionEvent]) -> None:
        """A channel change: re-evaluate the session's waiting deliveries."""
        await self.hydrated.wait()
        env = received.envelope
        applied = self.state.apply_interaction(env, received.stream_seq)
        if self._owes(applied, env.event_id):
            await self.evaluate_session(env.session_id, cause=env.event_id)
            self._undecided.discard(env.event_id)

    async def on_operation(self, received: Received[OperationEvent]) -> None:
        """A newer intent or an undo can make an owed result stale."""
        await self.hydrated.wait()
        env = received.envelope
        applied = self.state.apply_operation(env, received.stream_seq)
        deciding = isinstance(env.event, OperationAdmitted | OperationCompensated)
        if self._owes(applied and deciding, env.event_id):
            await self.evaluate_session(env.session_id, cause=env.event_id)
            self._undecided.discard(env.event_id)

    async def on_delivery(self, received: Received[DeliveryEvent]) -> None:
        """A new, sent, heard or unheard delivery: decide again for its session."""
        await self.hydrated.wait()
        env = received.envelope
        applied = self.state.apply_delivery(env, received.stream_seq)
        if self._owes(applied, env.event_id):
            if isinstance(env.event, DeliveryReady | DeliveryUnheard):
                await self._catch_up_channel(env.session_id)
            await self.evaluate_session(env.session_id, cause=env.event_id)
            self._undecided.discard(env.event_id)

    def _owes(self, applied: bool, event_id: str) -> bool:
        """Whether this event still owes a decision: newly folded, or folded by an earlier
        run of this handler that failed before deciding."""
        if applied:
            self._undecided.add(event_id)
        return event_id in self._undecided

    async def _catch_up_channel(self, session_id: str) -> None:
        """Before a new or an unheard closing is decided: the session's channel up to date.

        The channel travels on another stream's consumer and may arrive later than the
        delivery: a handoff would not yet have made an agent-owned result irrelevant, or a
        lost connection (recorded before the closing was given back) would be handed the
        closing again, once per lap. One request says whether the view is behind; only then
        is the session's subject read.
        """
        topo = self._rt.topology
        stream, subject = topo.stream_name(Context.INTERACTION), topo.session_subject(session_id)
        if await self._events.last_seq(stream, subject) <= self.state.channels.last_seq.get(
            session_id, 0
        ):
            return
        replayed = await self._events.read_subject(stream, subject, INTERACTION)
        for item in replayed.items:
            self.state.apply_interaction(item.envelope, item.stream_seq)

    # ------------------------------------------------------------------ deciding

    async def evaluate_session(self, session_id: str, *, cause: str | None) -> None:
        """Decide for every open delivery of the session, one session at a time."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        async with lock:
            for delivery in self.state.open_deliveries(session_id):
                await self._evaluate(delivery.delivery_id, cause)

    async def _evaluate(self, delivery_id: str, cause: str | None) -> None:
        state = self.state.deliveries.get(delivery_id)
        if state is None or not state.open:
            self._disarm(delivery_id)
            return
        subject = self._rt.topology.delivery_subject(state.session_id, delivery_id)

        async def decide() -> None:
            await self._decide(delivery_id, cause)

        async def reload() -> None:
            # The surface wrote (sent, spoken, unheard) meanwhile: reload and decide again.
            current = self.state.deliveries.get(delivery_id)
            if current is not None:
                await self._reload(current)

        await self._deliveries.retrying(subject, decide, refresh=reload)

    async def _decide(self, delivery_id: str, cause: str | None) -> None:
        state = self.state.deliveries.get(delivery_id)
        if state is None or not state.open:
            self._disarm(delivery_id)
            return
        now = self._clock.now()
        outcome = decide_delivery(state, self.state.view(state.session_id), now, self._policy)
        if outcome.events:
            await pause_point("policy.before_decision_recorded")
        await self._append(state, outcome.events, cause)
        if outcome.first_decision is not None and state.ready_at is not None:
            elapsed = max((now - state.ready_at).total_seconds(), 0.0)
            DELIVERY_READY_TO_DECISION.labels(decision=outcome.first_decision).observe(elapsed)
        if outcome.stale:
            STALE_DELIVERIES.inc()
        if outcome.resync:
            NEXT_TURN_RESYNCS.inc()
        self._arm(state.session_id, delivery_id, outcome.recheck_at)

    async def _append(
        self, state: DeliveryState, events: list[DeliveryEvent], cause: str | None
    ) -> None:
        subject = self._rt.topology.delivery_subject(state.session_id, state.delivery_id)
        for event in events:
            seq = self.state.deliveries.last_seq.get(state.delivery_id, 0)
            env: Envelope[DeliveryEvent] = delivery_envelope(
                state, event, event_id=self._ids.new("ev"), now=self._clock.now(),
                causation_id=cause,
            )
            appended = await self._deliveries.append(subject, env, expected=seq)
            self.state.apply_delivery(env, appended.seq)
            cause = env.event_id

    async def _reload(self, state: DeliveryState) -> None:
        loaded = await self._deliveries.load(
            self._rt.topology.delivery_subject(state.session_id, state.delivery_id)
        )
        if loaded.state is not None:
            self.state.replace_delivery(loaded.state, loaded.last_seq)

    # ------------------------------------------------------------------ timers

    def _arm(self, session_id: str, delivery_id: str, at: datetime | None) -> None:
        self._disarm(delivery_id)
        if at is None:
            return
        delay = max((at - self._clock.now()).total_seconds(), 0.0)
        loop = asyncio.get_running_loop()
        self._timers[delivery_id] = loop.call_later(
            delay, self._fire, session_id, delivery_id
        )

    def _disarm(self, delivery_id: str) -> None:
        handle = self._timers.pop(delivery_id, None)
        if handle is not None:
            handle.cancel()

    def _fire(self, session_id: str, delivery_id: str) -> None:
        self._timers.pop(delivery_id, None)
        task = asyncio.create_task(self._recheck(session_id, delivery_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _recheck(self, session_id: str, delivery_id: str) -> None:
        try:
            await self.evaluate_session(session_id, cause=None)
        except Exception:
            # A broker hiccup must not forget the timer: look again shortly.
            log.exception("re-evaluation of session %s failed; retrying", session_id)
            self._arm(session_id, delivery_id, self._clock.now() + _RETRY_AFTER)

