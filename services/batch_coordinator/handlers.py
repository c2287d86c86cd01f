"""The coordinator's shell: fold events, decide with the pure batch decider, append.

The batch subject (a wildcard over the batch's event kinds) is the aggregate. A batch is
due once every member's first terminal event is in the operations stream (the pure
`settlement`; the coordinator folds that stream anyway, so the batch's log records its
members only once, in `batch.drained`). Each step is appended with
Nats-Expected-Last-Subject-Sequence, checked over every kind, and the steps are ordered so
that any crash leaves a state that says what is left to do:

    claim `batch:{id}:final`  ->  delivery.ready (on the delivery subject, expected
    sequence 0)  ->  batch.drained (every member and how it settled)

The delivery id is derived from the batch id, so a restart between the claim and the
append re-appends the very same `delivery.ready`, and the delivery subject's expected
sequence 0 (over all of the delivery's kinds) makes a second one impossible even beyond the
duplicate window.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from libs.bus import (
    CONFLICT_RETRY,
    ClaimConflict,
    ConcurrencyConflict,
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
from libs.crash import crash_point
from libs.domain import OperationState, Projection
from libs.domain import batch as batch_domain
from libs.domain.batch import (
    BatchState,
    CloseBatch,
    MemberStatus,
    claim_key,
    final_delivery_id,
    final_delivery_key,
    member_status,
)
from libs.events import (
    BATCHES,
    OPERATIONS,
    BatchEvent,
    BatchOpened,
    DeliveryEvent,
    DeliveryReady,
    Envelope,
    OperationEvent,
    OperationProgress,
)
from libs.metrics import COMPLETE_TO_DELIVERY_READY, DUPLICATE_DELIVERIES
from libs.models import OperationOutcome, SummaryModel, explain_from_templates
from libs.service import Runtime
from libs.tools import ToolDeclaration, ToolRegistry

from .domain import (
    MemberView,
    Worded,
    evolve_member,
    needs_model,
    opened_from_batch,
    outcome_of,
    priority_of,
    progress_delivery_id,
    short_summary,
    template_summary,
)
from .settings import Settings

log = logging.getLogger(__name__)


class Coordinator:
    """Batch projections plus the handlers that close each batch exactly once."""

    # The batch events its consumer asks the broker for. `batch.drained` is its own:
    # `_append_batch` folds it as it is appended, and a
    # writer it did not hear from (another copy of this partition during a handoff) makes
    # its next append conflict, which reloads the whole batch through its wildcard subject.
    CONSUMED_BATCH_EVENTS: ClassVar[tuple[type[BatchEvent], ...]] = (BatchOpened,)

    def __init__(
        self,
        runtime: Runtime,
        settings: Settings,
        model: SummaryModel,
        *,
        registry: ToolRegistry | None = None,
        store: EventStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = RANDOM_IDS,
        retry: ConflictRetry = CONFLICT_RETRY,
    ) -> None:
        self._rt = runtime
        # The broker's store (read once connected) unless one is given (fast tests).
        self._store: EventStore = store if store is not None else ConnectedEventStore(runtime)
        topology = runtime.topology
        # Every write goes through these (libs/bus/repository.py); a losing batch step is
        # read and made again under the one conflict policy (`advance`).
        self._batch_log = Repository(
            self._store, aggregates.batches(topology), clock=clock, ids=ids, retry=retry
        )
        self._deliveries = Repository(
            self._store, aggregates.deliveries(topology), clock=clock, ids=ids
        )
        self.operations: Repository[OperationState, OperationEvent] = Repository(
            self._store, aggregates.operations(topology), clock=clock, ids=ids
        )
        self._clock = clock
        self._settings = settings
        self._model = model
        # Declarations word the closings (labels, a tool's own success line).
        self._registry = registry or ToolRegistry()
        self.batches: Projection[BatchState, BatchEvent] = Projection(
            batch_domain.evolve, key=lambda env: env.batch_id or ""
        )
        # Per operation, only what its closing reads (not the operation's state machine).
        self.members: Projection[MemberView, OperationEvent] = Projection(
            evolve_member, key=lambda env: env.operation_id or ""
        )
        # First terminal status seen per operation, whatever the state machine thinks of
        # a duplicate: the batch only needs to know that the member is done. With where
        # it was seen (stream sequence): the closing records members in that order.
        self.terminal: dict[str, MemberStatus] = {}
        self.terminal_order: dict[str, int] = {}
        self.op_batch: dict[str, str] = {}
        self.last_terminal_at: dict[str, datetime] = {}
        self.hydrated = asyncio.Event()
        self._locks: dict[str, asyncio.Lock] = {}

    @property
    def runtime(self) -> Runtime:
        """The process's runtime (its topology names the subjects)."""
        return self._rt

    @property
    def store(self) -> EventStore:
        """Where the coordinator reads and appends (the broker, or the given store)."""
        return self._store

    # ------------------------------------------------------------------ start-up

    async def hydrate(self) -> None:
        """Rebuild the projections from the streams, then finish what a crash left open."""
        js = self._rt.jetstream
        topo = self._rt.topology
        owns = self._settings.partition.owns
        await replay_owned(
            js, topo, Context.OPERATIONS, OPERATIONS, owns=owns, apply=self._fold_operation
        )
        await replay_owned(js, topo, Context.BATCHES, BATCHES, owns=owns, apply=self.batches.apply)
        self.hydrated.set()
        open_batches = [s for s in self.batches.states.values() if not s.closed]
        log.info("rebuilt %d batches (%d open)", len(self.batches.states), len(open_batches))
        for state in open_batches:
            await self.advance(state.session_id, state.batch_id, cause=None)

    # ------------------------------------------------------------------ handlers

    async def on_operation(self, received: Received[OperationEvent]) -> None:
        """An operation event: settle its batch member, or publish a progress note."""
        await self.hydrated.wait()
        env = received.envelope
        self._fold_operation(env, received.stream_seq)
        op_id = env.operation_id or ""
        batch_id = env.batch_id or self.op_batch.get(op_id)
        if batch_id is None:
            return
        if isinstance(env.event, OperationProgress):
            await self._progress(env, batch_id)
            return
        if member_status(env.event) is None:
            return
        previous = self.last_terminal_at.get(batch_id)
        if previous is None or env.occurred_at > previous:
            self.last_terminal_at[batch_id] = env.occurred_at
        await self.advance(env.session_id, batch_id, cause=env.event_id)

    async def on_batch(self, received: Received[BatchEvent]) -> None:
        """A batch opened (the only kind asked for): fold it; its members may have settled."""
        await self.hydrated.wait()
        env = received.envelope
        self.batches.apply(env, received.stream_seq)
        if isinstance(env.event, BatchOpened) and env.batch_id:
            await self.advance(env.session_id, env.batch_id, cause=env.event_id)

    def _fold_operation(self, env: Envelope[OperationEvent], seq: int) -> None:
        op_id = env.operation_id or ""
        self.members.apply(env, seq)
        if env.batch_id:
            self.op_batch.setdefault(op_id, env.batch_id)
        status = member_status(env.event)
        if status is not None:
            first = op_id not in self.terminal
            self.terminal.setdefault(op_id, status)
            self.terminal_order.setdefault(op_id, seq)
            batch_id = env.batch_id or self.op_batch.get(op_id)
            state = self.batches.get(batch_id) if batch_id else None
            if not first and state is not None and state.closed:
                # A repeat (a callback twice) that would have meant a second closing.
                DUPLICATE_DELIVERIES.inc()

    # ------------------------------------------------------------------ batch steps

    async def advance(self, session_id: str, batch_id: str, *, cause: str | None) -> None:
        """Close the batch once every member is known to be terminal."""
        lock = self._locks.setdefault(batch_id, asyncio.Lock())
        subject = self._rt.topology.batch_subject(session_id, batch_id)

        async def step() -> None:
            await self._advance(session_id, batch_id, cause)

        async def reload() -> None:
            log.info("batch %s moved under us; reloading", batch_id)
            await self._reload(session_id, batch_id)

        async with lock:
            await self._batch_log.retrying(subject, step, refresh=reload)

    async def _advance(self, session_id: str, batch_id: str, cause: str | None) -> None:
        state, seq = await self._batch(session_id, batch_id)
        if state is None:
            # Not opened (yet): batch.opened closes it if its members are already terminal.
            return
        settled = batch_domain.settlement(state, self.terminal, self.terminal_order)
        if settled is not None:
            await self._close(state, seq, settled, cause)

    async def _close(
        self, state: BatchState, seq: int, settled: dict[str, MemberStatus], cause: str | None
    ) -> None:
        delivery_id = final_delivery_id(state.batch_id)
        try:
            key = claim_key(final_delivery_key(state.batch_id))
            await self.store.claim_once("deliveries", key, delivery_id.encode())
        except ClaimConflict as exc:
            # Claimed by another version with another id: that one is the closing.
            delivery_id = exc.existing.decode()
            log.warning("batch %s closing already claimed as %s", state.batch_id, delivery_id)
        crash_point("coordinator.after_claim")
        members = [await self._member(state, m) for m in state.members]
        outcomes = [
            outcome_of(m, settled[m], s, self._declaration(s))
            for m, s in zip(state.members, members, strict=True)
        ]
        text = await self._summary(outcomes)
        ready: Envelope[DeliveryEvent] = Envelope(
            event_id=f"{delivery_id}-ready",
            occurred_at=self._clock.now(),
            session_id=state.session_id,
            turn_id=state.turn_id,
            batch_id=state.batch_id,
            delivery_id=delivery_id,
            agent=state.agent,
            causation_id=cause,
            event=DeliveryReady(
                kind="final",
                priority=priority_of(members),
                text=text,
                short_text=short_summary(outcomes, self._settings.language),
                source_operation_ids=state.members,
            ),
        )
        subject = self._rt.topology.delivery_subject(state.session_id, delivery_id)
        try:
            appended = await self._deliveries.append(subject, ready, expected=0)
            if not appended.duplicate:
                terminal_at = self.last_terminal_at.get(state.batch_id)
                if terminal_at is not None:
                    elapsed = (ready.occurred_at - terminal_at).total_seconds()
                    COMPLETE_TO_DELIVERY_READY.observe(max(elapsed, 0.0))
        except ConcurrencyConflict:
            # Appended before a crash: the subject holds the one closing already.
            log.info("batch %s: closing %s already ready", state.batch_id, delivery_id)
        crash_point("coordinator.after_ready")
        drained = batch_domain.decide(state, CloseBatch(delivery_id, settled))
        await self._append_batch(state, seq, drained, ready.event_id)

    def _declaration(self, state: Worded | None) -> ToolDeclaration | None:
        if state is None or not self._registry.has(state.tool):
            return None
        return self._registry.tool(state.tool)

    async def _summary(self, outcomes: Sequence[OperationOutcome]) -> str:
        language = self._settings.language
        if not needs_model(outcomes):
            return template_summary(outcomes, language)
        try:
            return await self._model.explain_failures(outcomes, language=language)
        except Exception:
            # A closing must not hang on a model outage: the templates' words are always true.
            log.exception("model %s failed; using the template explanation", self._model.name)
            return explain_from_templates(outcomes, language=language)

    async def _progress(self, env: Envelope[OperationEvent], batch_id: str) -> None:
        event = env.event
        assert isinstance(event, OperationProgress)
        state, _seq = await self._batch(env.session_id, batch_id)
        if state is None or state.closed or self._due(state):
            # Never a note after (or racing) the closing.
            return
        delivery_id = progress_delivery_id(env.event_id)
        note: Envelope[DeliveryEvent] = Envelope(
            event_id=f"{delivery_id}-ready",
            occurred_at=self._clock.now(),
            session_id=env.session_id,
            turn_id=state.turn_id,
            operation_id=env.operation_id,
            batch_id=batch_id,
            delivery_id=delivery_id,
            agent=state.agent,
            causation_id=env.event_id,
            event=DeliveryReady(
                kind="progress",
                text=event.message,
                short_text=event.message,
                source_operation_ids=(env.operation_id or "",),
            ),
        )
        subject = self._rt.topology.delivery_subject(env.session_id, delivery_id)
        try:
            await self._deliveries.append(subject, note, expected=0)
        except ConcurrencyConflict:
            return

    def _due(self, state: BatchState) -> bool:
        return batch_domain.settlement(state, self.terminal, self.terminal_order) is not None

    # ------------------------------------------------------------------ loading

    async def _batch(self, session_id: str, batch_id: str) -> tuple[BatchState | None, int]:
        state = self.batches.get(batch_id)
        if state is None:
            await self._reload(session_id, batch_id)
            state = self.batches.get(batch_id)
        return state, self.batches.last_seq.get(batch_id, 0)

    async def _reload(self, session_id: str, batch_id: str) -> None:
        loaded = await self._batch_log.load(self._rt.topology.batch_subject(session_id, batch_id))
        # Never step back behind what the consumer applied while the replay ran.
        if loaded.state is not None and loaded.last_seq >= self.batches.last_seq.get(batch_id, 0):
            self.batches.states[batch_id] = loaded.state
            self.batches.last_seq[batch_id] = loaded.last_seq

    async def _append_batch(
        self, state: BatchState, seq: int, events: list[BatchEvent], cause: str | None
    ) -> tuple[BatchState, int]:
        subject = self._rt.topology.batch_subject(state.session_id, state.batch_id)
        for event in events:
            env = Envelope(
                event_id=_batch_event_id(state.batch_id, event),
                occurred_at=self._clock.now(),
                session_id=state.session_id,
                turn_id=state.turn_id,
                batch_id=state.batch_id,
                agent=state.agent,
                causation_id=cause,
                event=event,
            )
            appended = await self._batch_log.append(subject, env, expected=seq)
            new_state = self.batches.apply(env, appended.seq)
            state, seq = new_state or state, appended.seq
            crash_point(f"coordinator.after_{str(event.__struct_config__.tag).split('.')[-1]}")
        return state, seq

    async def _member(self, state: BatchState, operation_id: str) -> Worded | None:
        view = opened_from_batch(self.members.get(operation_id), state, operation_id)
        if view is not None and view.opened:
            return view
        # Never seen what the operation is (a batch opened by an earlier version, and no
        # request or rejection folded): its own subject says, through its state machine.
        loaded = await self.operations.load(
            self._rt.topology.operation_subject(state.session_id, operation_id)
        )
        return loaded.state


def _batch_event_id(batch_id: str, event: BatchEvent) -> str:
    # Deterministic per step: a repeat of the same step inside the dedup window is dropped.
    tag = event.__struct_config__.tag
    member = getattr(event, "member_operation_id", "")
    return f"{batch_id}:{tag}:{member}".rstrip(":")
