"""Admission: the application decides what the model may do, while the user waits.

This is the I/O shell. For one turn it asks the pure planner (`plan.py`) what every proposed
call becomes, takes the create-once intent claims (`claims.py`), and persists every outcome
as events: `batch.opened` first, then per member `operation.admitted`, `operation.rejected`
or `operation.requested` + `operation.awaiting_confirmation`. Confirmation, cancellation and
compensation are decided in `followups.py`; here they are only loaded and appended.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from nats.js.kv import KeyValue

from libs import metrics
from libs.bus import (
    CONFLICT_RETRY,
    ConflictRetry,
    EventStore,
    Loaded,
    Repository,
    TooManyConflicts,
    Topology,
    aggregates,
)
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.domain import OperationState, OpStatus
from libs.events import (
    Envelope,
    OperationCancel,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCompensated,
    OperationEvent,
)
from libs.tools import ToolRegistry

from . import followups
from .answers import outcome
from .claims import IntentClaims
from .load import LoadView
from .plan import claim_value, fresh, plan_admission
from .plan_types import AdmissionOutcome, Plan, ToolCall, TurnAdmission, TurnContext
from .writes import batch_opened, envelope, plan_events, plan_ids


class Admission:
    """Turns proposed tool calls into admitted, rejected or pending operations."""

    def __init__(
        self,
        store: EventStore,
        topology: Topology,
        registry: ToolRegistry,
        view: LoadView,
        intents: KeyValue,
        *,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = RANDOM_IDS,
        retry: ConflictRetry = CONFLICT_RETRY,
    ) -> None:
        # Every write goes through these (libs/bus/repository.py), over the process's store.
        self._operations = Repository(
            store, aggregates.operations(topology), clock=clock, ids=ids, retry=retry
        )
        self._batches = Repository(store, aggregates.batches(topology), clock=clock, ids=ids)
        self._control = Repository(store, aggregates.control(topology), clock=clock, ids=ids)
        self._topology = topology
        self._registry = registry
        self._view = view
        self._claims = IntentClaims(intents, self._holder_state)
        # The process's clock and id factory (libs/clock.py); the planners get their values.
        self._clock = clock
        self._new_id = ids.new

    # -- loading -------------------------------------------------------------------------
    async def _holder_state(self, operation_id: str) -> OperationState | None:
        if (state := self._view.get(operation_id)) is not None:
            return state
        # The holder may belong to another session: find its subject through the wildcard.
        loaded = await self._load(self._topology.operation_anywhere(operation_id))
        return loaded.state

    async def _load(self, subject: str) -> Loaded[OperationState, OperationEvent]:
        return await self._operations.load(subject)

    # -- writing -------------------------------------------------------------------------
    def _env(self, ctx: TurnContext, event: Any, now: datetime, **ids: Any) -> Envelope[Any]:
        return envelope(ctx, event, now, self._new_id("ev"), **ids)

    async def _append_all(self, subject: str, envs: list[Envelope[Any]], expected: int) -> None:
        """Append in order, each guarded by the sequence of the one before."""
        for env in envs:
            ack = await self._operations.append(subject, env, expected=expected)
            self._view.apply(env, ack.seq)
            expected = ack.seq

    async def _write(self, ctx: TurnContext, plan: Plan, batch_id: str, now: datetime) -> None:
        subject = self._topology.operation_subject(ctx.session_id, plan.operation_id)
        ids = plan_ids(plan, batch_id)
        envs = [self._env(ctx, e, now, **ids) for e in plan_events(ctx, plan, now)]
        if plan.kind == "reject":
            reason = plan.reason or "invalid_arguments"
            metrics.OPERATIONS_REJECTED.labels(plan.tool, reason).inc()
        elif plan.kind == "admit":
            metrics.OPERATIONS_ADMITTED.labels(plan.tool).inc()
        await self._append_all(subject, envs, 0)

    async def _open_batch(self, ctx: TurnContext, env: Envelope[Any], batch_id: str) -> None:
        await self._batches.append(
            self._topology.batch_subject(ctx.session_id, batch_id), env, expected=0
        )

    # -- a turn --------------------------------------------------------------------------
    async def admit(self, ctx: TurnContext, calls: list[ToolCall]) -> TurnAdmission:
        """Admit a turn's tool calls; returns on acceptance, never waits for execution."""
        now = self._clock.now()
        turn = plan_admission(
            ctx, calls, registry=self._registry, view=self._view, now=now, new_id=self._new_id
        )
        # Held in the view until the events are written, so a concurrent turn in this
        # process sees them at once; the written events then count instead.
        for slot in turn.reservations:
            self._view.reserve(*slot)
        try:
            return await self._admit(ctx, list(turn.plans), now)
        finally:
            for slot in turn.reservations:
                self._view.reserve(*slot, delta=-1)

    async def _admit(self, ctx: TurnContext, plans: list[Plan], now: datetime) -> TurnAdmission:
        with metrics.turn_phase("admission_intent_claims"):
            claimed = await asyncio.gather(
                *(self._claims.claim(p) if p.kind == "admit" else _same(p) for p in plans)
            )
        plans = list(claimed)
        members = fresh(plans)
        batch_id: str | None = None
        if members:
            batch_id = self._new_id("batch")
            opened = batch_opened(members)
            with metrics.turn_phase("admission_batch_append"):
                await self._open_batch(
                    ctx, self._env(ctx, opened, now, batch_id=batch_id), batch_id
                )
            with metrics.turn_phase("admission_operation_appends"):
                await asyncio.gather(*(self._write(ctx, p, batch_id, now) for p in members))
        for plan in members:
            if plan.kind == "reject":
                # A refused request replaces nothing: the older intent still stands.
                continue
            for older in plan.supersedes:
                await self._supersede(ctx, older, plan.operation_id)
        return TurnAdmission(
            batch_id=batch_id,
            outcomes=tuple(self._outcome(p, batch_id, ctx.session_id) for p in plans),
        )

    def _outcome(self, plan: Plan, batch_id: str | None, session_id: str) -> AdmissionOutcome:
        joined = self._view.get(plan.operation_id) if plan.kind == "existing" else None
        return outcome(plan, batch_id, session_id, joined)

    # -- follow-ups: confirmation, cancellation, compensation ------------------------------
    async def confirm(
        self, ctx: TurnContext, operation_id: str, *, accept: bool
    ) -> AdmissionOutcome:
        """The user's yes or no to an operation awaiting confirmation."""
        subject = self._topology.operation_subject(ctx.session_id, operation_id)
        loaded = await self._load(subject)
        state = loaded.state
        if (refused := followups.confirm_refusal(operation_id, state)) is not None:
            return refused
        assert state is not None
        plan = followups.confirm_plan(state, self._registry.tool(state.tool))
        now = self._clock.now()
        if accept and plan.intent_key:
            claimed = await self._claims.claim(plan)
            if claimed.operation_id != operation_id or claimed.kind != "admit":
                plan.intent_key = followups.repeat_key(plan, operation_id)
                await self._claims.create(plan.intent_key, claim_value(plan))
        events = followups.decide_confirm(ctx, plan, accept=accept, now=now)
        ids = plan_ids(plan, state.batch_id)
        await self._append_all(
            subject, [self._env(ctx, e, now, **ids) for e in events], loaded.last_seq
        )
        if accept:
            metrics.OPERATIONS_ADMITTED.labels(state.tool).inc()
        else:
            metrics.OPERATIONS_REJECTED.labels(state.tool, "confirmation_declined").inc()
        return followups.confirmed(state, plan, accept=accept)

    async def _supersede(self, ctx: TurnContext, older: str, newer: str) -> None:
        """Cancel what has not happened; compensate what already has (the result is stale)."""
        answer = await self.request_cancel(ctx, older, reason=f"superseded by {newer}")
        if followups.needs_compensation(answer):
            await self.compensate(ctx, older)

    async def request_cancel(
        self, ctx: TurnContext, operation_id: str, *, reason: str
    ) -> AdmissionOutcome:
        """An explicit cancellation request ("don't do the transfer").

        The request itself is a control event; its effect on the operation is decided in
        `followups.decide_cancel` and appended at once: `cancel_requested` (the worker then
        cancels for real and only a confirmed state says "cancelled"), or a refusal with the
        compensation on offer.
        """
        now = self._clock.now()
        cancel = OperationCancel(reason=reason, requested_by=ctx.user_id)
        request = self._env(ctx, cancel, now, operation_id=operation_id)
        await self._control.record(self._topology.control_subject(ctx.session_id), request)
        subject = self._topology.operation_subject(ctx.session_id, operation_id)

        def decide(
            state: OperationState | None, _: None, now: datetime
        ) -> list[OperationEvent]:
            event = self._cancel_decision(operation_id, state, ctx, reason).event
            return [] if event is None else [event]

        def stamp(
            state: OperationState | None, event: OperationEvent, event_id: str, _: datetime
        ) -> Envelope[OperationEvent]:
            assert state is not None
            return envelope(
                ctx, event, now, event_id, operation_id=operation_id,
                intent_key=state.intent_key, batch_id=state.batch_id,
                causation_id=request.event_id,
            )

        try:
            written = await self._operations.run(subject, decide, None, stamp=stamp)
        except TooManyConflicts:
            return AdmissionOutcome(
                operation_id, "", "unknown", None, reason=followups.CANCEL_RACED
            )
        state = written.state
        if not written.envelopes:
            answer = self._cancel_decision(operation_id, state, ctx, reason).answer
            assert answer is not None
            return answer
        assert state is not None
        env = written.envelopes[0]
        self._view.apply(env, written.last_seq)
        cancel_event = env.event
        assert isinstance(cancel_event, OperationCancelRequested | OperationCancelRefused)
        if isinstance(cancel_event, OperationCancelRequested):
            metrics.CANCELLATIONS_REQUESTED.labels(state.tool).inc()
        return followups.cancelled(operation_id, state, cancel_event)

    def _cancel_decision(
        self, operation_id: str, state: OperationState | None, ctx: TurnContext, reason: str
    ) -> followups.CancelDecision:
        compensating = (
            self._registry.tool(state.tool).compensating_tool
            if state is not None and state.status is OpStatus.COMMITTED
            else None
        )
        return followups.decide_cancel(
            operation_id, state, user_id=ctx.user_id, reason=reason,
            compensating_tool=compensating,
        )

    async def compensate(self, ctx: TurnContext, operation_id: str) -> AdmissionOutcome:
        """Undo a committed operation with its declared compensating tool, as a new operation."""
        subject = self._topology.operation_subject(ctx.session_id, operation_id)
        loaded = await self._load(subject)
        state = loaded.state
        committed = state is not None and state.status is OpStatus.COMMITTED
        declaration = self._registry.tool(state.tool) if state is not None and committed else None
        linked_state = (
            self._view.get(state.compensated_by) if state and state.compensated_by else None
        )
        refused = followups.compensation_refusal(operation_id, state, declaration, linked_state)
        if refused is not None:
            return refused
        assert state is not None
        assert declaration is not None
        assert declaration.compensating_tool is not None
        comp = self._registry.tool(declaration.compensating_tool)
        now = self._clock.now()
        plan = followups.compensation_plan(ctx, state, declaration, comp, self._new_id)
        plan = await self._claims.claim(plan)
        if plan.kind != "admit":
            return self._outcome(plan, None, ctx.session_id)
        batch_id = self._new_id("batch")
        ids = plan_ids(plan, batch_id)
        opened = batch_opened([plan])
        await self._open_batch(ctx, self._env(ctx, opened, now, **ids), batch_id)
        admitted = followups.compensation_admitted(ctx, plan, comp, operation_id, now)
        await self._append_all(
            self._topology.operation_subject(ctx.session_id, plan.operation_id),
            [self._env(ctx, admitted, now, **ids)],
            0,
        )
        linked = OperationCompensated(compensation_operation_id=plan.operation_id)
        link = self._env(ctx, linked, now, operation_id=operation_id)
        await self._operations.append(subject, link, expected=loaded.last_seq)
        metrics.COMPENSATIONS.labels(state.tool).inc()
        return AdmissionOutcome(
            plan.operation_id, comp.name, OpStatus.ADMITTED.value, batch_id, plan.intent_key
        )


async def _same(plan: Plan) -> Plan:
    return plan
