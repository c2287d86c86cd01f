"""Admission: the application decides what the model may do, while the user waits.

For one turn it validates, authorises and limits every proposed call, maps repeats of an
intent onto the operation already admitted for it (create-once claims in KV, so this holds
beyond the broker's duplicate window and across restarts), and persists every outcome as
events: `batch.opened` first, then per member `operation.admitted`, `operation.rejected`
or `operation.requested` + `operation.awaiting_confirmation`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from nats.js import JetStreamContext
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from libs import metrics
from libs.bus import ConcurrencyConflict, Context, Topology, append, load
from libs.domain import OperationState, OpStatus, operation
from libs.events import (
    BATCHES,
    CONTROL,
    OPERATIONS,
    BatchOpened,
    Envelope,
    OperationAdmitted,
    OperationAwaitingConfirmation,
    OperationCancel,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCompensated,
    OperationConfirmed,
    OperationRejected,
    OperationRequested,
    RejectReason,
)
from libs.tools import Caller, ToolDeclaration, ToolRegistry, UnknownTool

from . import rules
from .intent import digest, intent_key, subject_key
from .load import LoadView

PlanKind = Literal["admit", "reject", "confirm", "existing"]

_REUSABLE = frozenset({OpStatus.FAILED_FINAL, OpStatus.CANCELLED, OpStatus.REJECTED})
_HOUR = timedelta(hours=1)
# How long a claim without events is taken for an admission still writing them (another
# session of the same user racing this one) before it is adopted as a crashed one.
_HOLDER_GRACE_S = 3.0
_HOLDER_POLL_S = 0.05
# A join of another session's operation: that session's batch carries the closing.
ELSEWHERE = "handled_elsewhere"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call as the model proposed it."""

    tool: str
    arguments: dict[str, Any]
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Who is asking, in which session, turn and agent."""

    session_id: str
    turn_id: str
    tenant_id: str
    user_id: str
    agent: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """What admission answered for one item."""

    operation_id: str
    tool: str
    status: str
    batch_id: str | None
    intent_key: str | None = None
    existing: bool = False
    reason: str | None = None
    detail: str = ""
    prompt: str | None = None
    subject_key: str | None = None
    # Older operations this one replaces (cancelled, or compensated when already done).
    supersedes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TurnAdmission:
    """Every outcome of one turn, and its batch (None when nothing new was created)."""

    batch_id: str | None
    outcomes: tuple[Outcome, ...]


@dataclass(slots=True)
class _Plan:
    kind: PlanKind
    tool: str
    operation_id: str
    tool_call_id: str | None = None
    declaration: ToolDeclaration | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    intent_key: str | None = None
    subject_key: str | None = None
    reason: RejectReason | None = None
    detail: str = ""
    existing: OperationState | None = None
    supersedes: tuple[str, ...] = ()
    # Capacity this plan holds in the load view until its events are written.
    reserved: tuple[str, str, str] | None = None


class Admission:
    """Turns proposed tool calls into admitted, rejected or pending operations."""

    def __init__(
        self,
        js: JetStreamContext,
        topology: Topology,
        registry: ToolRegistry,
        view: LoadView,
        intents: KeyValue,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_id: Callable[[str], str] = lambda prefix: f"{prefix}_{uuid.uuid4().hex[:20]}",
    ) -> None:
        self._js = js
        self._topology = topology
        self._registry = registry
        self._view = view
        self._intents = intents
        self._clock = clock
        self._new_id = new_id

    # -- planning (no I/O but the KV claims at the end) ---------------------------------
    def _plan_call(self, ctx: TurnContext, call: ToolCall, now: datetime) -> list[_Plan]:
        def reject(reason: RejectReason, detail: str, **kw: Any) -> _Plan:
            return _Plan(
                "reject",
                call.tool,
                self._new_id("op"),
                call.tool_call_id,
                reason=reason,
                detail=detail,
                **kw,
            )

        try:
            declaration = self._registry.tool(call.tool)
        except UnknownTool:
            return [reject("unknown_tool", f"no tool named {call.tool!r}")]
        caller = Caller(ctx.tenant_id, ctx.user_id, ctx.agent)
        if declaration.internal:
            return [reject("unknown_tool", f"{call.tool} is not offered to agents")]
        if refusal := rules.agent_allowed(declaration, caller):
            return [reject(*refusal)]
        items = rules.expand(declaration, call.arguments)
        if isinstance(items, tuple):
            return [reject(*items)]
        return [
            self._plan_item(ctx, caller, declaration, raw, call.tool_call_id, now=now)
            for raw in items
        ]

    def _plan_item(
        self,
        ctx: TurnContext,
        caller: Caller,
        declaration: ToolDeclaration,
        raw: dict[str, Any],
        tool_call_id: str | None,
        *,
        now: datetime,
    ) -> _Plan:
        plan = _Plan("admit", declaration.name, self._new_id("op"), tool_call_id, declaration)
        checked = rules.check_item(declaration, raw, caller)
        if isinstance(checked, tuple):
            return replace(plan, kind="reject", reason=checked[0], detail=checked[1])
        plan.arguments = checked
        plan.intent_key = intent_key(ctx.tenant_id, ctx.user_id, declaration.name, checked)
        plan.subject_key = subject_key(
            ctx.tenant_id, ctx.user_id, declaration.name, declaration.subject_key_fields, checked
        )
        recent = self._view.recent(declaration.name, ctx.user_id, now, _HOUR)
        if refusal := rules.business_limits(declaration, checked, recent):
            return replace(plan, kind="reject", reason=refusal[0], detail=refusal[1])
        existing = self._view.by_intent(plan.intent_key)
        if existing is not None and existing.status not in _REUSABLE:
            return self._on_duplicate(plan, existing)
        if declaration.duplicate_policy == "replace" and plan.subject_key:
            # Older intents on the same subject that still stand (running or done):
            # the new one replaces them, for real, at the system of record too.
            older = self._view.on_subject(ctx.session_id, plan.subject_key)
            plan.supersedes = tuple(
                s.operation_id
                for s in older
                if s.intent_key != plan.intent_key
                and s.status not in _REUSABLE
                and s.compensated_by is None
            )
        return self._plan_capacity(ctx, plan, declaration)

    def _on_duplicate(self, plan: _Plan, existing: OperationState) -> _Plan:
        declaration = plan.declaration
        assert declaration is not None
        match declaration.duplicate_policy:
            case "allow" | "replace":
                return replace(
                    plan, kind="existing", operation_id=existing.operation_id, existing=existing
                )
            case "reject":
                return replace(
                    plan,
                    kind="reject",
                    reason="duplicate",
                    detail=f"same request as {existing.operation_id}",
                )
            case "confirm":
                if existing.status is OpStatus.AWAITING_CONFIRMATION:
                    return replace(
                        plan, kind="existing", operation_id=existing.operation_id, existing=existing
                    )
                return replace(plan, kind="confirm", detail=f"repeats {existing.operation_id}")

    def _plan_capacity(self, ctx: TurnContext, plan: _Plan, declaration: ToolDeclaration) -> _Plan:
        load_now = self._view.load(declaration.name, ctx.tenant_id, ctx.user_id)
        over = rules.over_capacity(declaration, load_now)
        if over is not None:
            match declaration.overflow:
                case "reject":
                    return replace(plan, kind="reject", reason="backpressure", detail=over)
                case "queue":
                    if not rules.queue_has_room(declaration, load_now):
                        return replace(
                            plan, kind="reject", reason="backpressure", detail=f"queue full: {over}"
                        )
                case "coalesce":
                    twin = self._view.open_with_digest(
                        ctx.tenant_id, declaration.name, digest(plan.arguments)
                    )
                    if twin is None:
                        return replace(plan, kind="reject", reason="backpressure", detail=over)
                    return replace(
                        plan, kind="existing", operation_id=twin.operation_id, existing=twin
                    )
                case "degrade":
                    plan.arguments = {**plan.arguments, "_degraded": True}
        if declaration.needs_confirmation and plan.kind == "admit":
            plan.kind = "confirm"
        if plan.kind == "admit":
            self._view.reserve(declaration.name, ctx.tenant_id, ctx.user_id)
            plan.reserved = (declaration.name, ctx.tenant_id, ctx.user_id)
        return plan

    # -- claims ----------------------------------------------------------------------------
    async def _claim(self, plan: _Plan) -> _Plan:
        """Take the intent for this plan, or find who holds it (beyond the dedup window)."""
        assert plan.intent_key is not None
        value = f"{plan.operation_id}|{digest(plan.arguments)}".encode()
        try:
            await self._intents.create(plan.intent_key, value)
        except KeyWrongLastSequenceError:
            pass
        else:
            return plan
        entry = await self._intents.get(plan.intent_key)
        holder, _, held_digest = (entry.value or b"").decode().partition("|")
        if held_digest != digest(plan.arguments):
            return replace(
                plan,
                kind="reject",
                reason="duplicate",
                detail="intent key reused with other arguments",
            )
        state = await self._holder(plan, holder)
        if state is None:
            # Claimed by an admission that crashed before writing events: adopt its id.
            return replace(plan, operation_id=holder)
        if state.status in _REUSABLE:
            try:
                await self._intents.update(plan.intent_key, value, last=entry.revision)
            except KeyWrongLastSequenceError:
                return await self._claim(plan)
            return plan
        return self._on_duplicate(plan, state)

    async def _holder(self, plan: _Plan, holder: str) -> OperationState | None:
        """The holder's state; a claim seen before its events is given time to write them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _HOLDER_GRACE_S
        while True:
            state = self._view.get(holder) or await self._load(plan, holder)
            if state is not None or loop.time() >= deadline:
                return state
            await asyncio.sleep(_HOLDER_POLL_S)

    async def _load(self, plan: _Plan, operation_id: str) -> OperationState | None:
        # The holder may belong to another session: find its subject through the wildcard.
        subject = f"{self._topology.prefix}.operations.*.{operation_id}"
        loaded = await load(
            self._js,
            self._topology.stream_name(Context.OPERATIONS),
            subject,
            OPERATIONS,
            operation.evolve,
        )
        return loaded.state

    # -- writing -----------------------------------------------------------------------
    def _env(self, ctx: TurnContext, event: Any, now: datetime, **ids: Any) -> Envelope[Any]:
        """An envelope carrying the turn's identities plus the ones given."""
        return Envelope(
            event_id=self._new_id("ev"),
            occurred_at=now,
            session_id=ctx.session_id,
            turn_id=ctx.turn_id,
            agent=ctx.agent,
            event=event,
            **ids,
        )

    def _envelope(
        self, ctx: TurnContext, plan: _Plan, batch_id: str | None, event: Any, now: datetime
    ) -> Envelope[Any]:
        return self._env(
            ctx,
            event,
            now,
            tool_call_id=plan.tool_call_id,
            operation_id=plan.operation_id,
            intent_key=plan.intent_key,
            subject_key=plan.subject_key,
            batch_id=batch_id,
        )

    async def _write(self, ctx: TurnContext, plan: _Plan, batch_id: str, now: datetime) -> None:
        subject = self._topology.operation_subject(ctx.session_id, plan.operation_id)
        declaration = plan.declaration
        events: list[Any]
        match plan.kind:
            case "reject":
                events = [
                    OperationRejected(
                        tool=plan.tool,
                        reason=plan.reason or "invalid_arguments",
                        detail=plan.detail,
                    )
                ]
                metrics.OPERATIONS_REJECTED.labels(
                    plan.tool, plan.reason or "invalid_arguments"
                ).inc()
            case "confirm":
                assert declaration is not None
                events = [
                    OperationRequested(tool=plan.tool, arguments=plan.arguments),
                    OperationAwaitingConfirmation(
                        prompt=_prompt(declaration, plan.arguments, plan.detail)
                    ),
                ]
            case _:
                assert declaration is not None
                events = [self._admitted(ctx, declaration, plan.arguments, now)]
                metrics.OPERATIONS_ADMITTED.labels(plan.tool).inc()
        expected = 0
        for event in events:
            env = self._envelope(ctx, plan, batch_id, event, now)
            ack = await append(
                self._js, OPERATIONS, subject, env, expected_last_subject_seq=expected
            )
            self._view.apply(env, ack.seq)
            expected = ack.seq

    def _admitted(
        self,
        ctx: TurnContext,
        declaration: ToolDeclaration,
        arguments: dict[str, Any],
        now: datetime,
        compensates: str | None = None,
    ) -> OperationAdmitted:
        return OperationAdmitted(
            tool=declaration.name,
            arguments=arguments,
            tenant_id=ctx.tenant_id,
            user_id=ctx.user_id,
            owner=declaration.owner,
            priority=declaration.priority,
            idempotent=declaration.idempotent,
            compensates=compensates,
            deadline_at=now + timedelta(seconds=declaration.deadline_s),
        )

    async def admit(self, ctx: TurnContext, calls: list[ToolCall]) -> TurnAdmission:
        """Admit a turn's tool calls; returns on acceptance, never waits for execution."""
        planned: list[_Plan] = []
        try:
            return await self._admit(ctx, calls, planned)
        finally:
            # The written events now count in the view; drop this turn's reservations.
            for plan in planned:
                if plan.reserved is not None:
                    self._view.reserve(*plan.reserved, delta=-1)

    async def _admit(
        self, ctx: TurnContext, calls: list[ToolCall], planned: list[_Plan]
    ) -> TurnAdmission:
        now = self._clock()
        plans: list[_Plan] = []
        seen: dict[str, _Plan] = {}
        for call in calls:
            for plan in self._plan_call(ctx, call, now):
                planned.append(plan)
                twin = seen.get(plan.intent_key or "")
                if twin is not None:
                    # The model asked for the same thing twice in one turn: one operation.
                    plans.append(replace(twin, kind="existing", tool_call_id=plan.tool_call_id))
                    continue
                if plan.intent_key:
                    seen[plan.intent_key] = plan
                plans.append(plan)
        with metrics.turn_phase("admission_intent_claims"):
            claimed = await asyncio.gather(
                *(self._claim(p) if p.kind == "admit" else _same(p) for p in plans)
            )
        plans = list(claimed)
        fresh = [
            p for p in plans if p.kind in ("admit", "reject", "confirm") and p.existing is None
        ]
        batch_id: str | None = None
        if fresh:
            batch_id = self._new_id("batch")
            members = BatchOpened(operation_ids=tuple(p.operation_id for p in fresh))
            opened = self._env(ctx, members, now, batch_id=batch_id)
            with metrics.turn_phase("admission_batch_append"):
                await append(
                    self._js,
                    BATCHES,
                    self._topology.batch_subject(ctx.session_id, batch_id),
                    opened,
                    expected_last_subject_seq=0,
                )
            with metrics.turn_phase("admission_operation_appends"):
                await asyncio.gather(*(self._write(ctx, p, batch_id, now) for p in fresh))
        for plan in fresh:
            if plan.kind == "reject":
                # A refused request replaces nothing: the older intent still stands.
                continue
            for older in plan.supersedes:
                await self._supersede(ctx, older, plan.operation_id)
        return TurnAdmission(
            batch_id=batch_id,
            outcomes=tuple(self._outcome(p, batch_id, ctx.session_id) for p in plans),
        )

    def _outcome(self, plan: _Plan, batch_id: str | None, session_id: str) -> Outcome:
        if plan.existing is not None or plan.kind == "existing":
            state = plan.existing or self._view.get(plan.operation_id)
            # The same intent asked in another session of the user joins that session's
            # operation; its closing goes there, so this session must not be promised one.
            elsewhere = state is not None and state.session_id != session_id
            return Outcome(
                operation_id=plan.operation_id,
                tool=plan.tool,
                status=state.status.value if state else OpStatus.ADMITTED.value,
                batch_id=state.batch_id if state else None,
                intent_key=plan.intent_key,
                existing=True,
                reason=ELSEWHERE if elsewhere else None,
                subject_key=plan.subject_key,
            )
        status = {
            "admit": OpStatus.ADMITTED,
            "reject": OpStatus.REJECTED,
            "confirm": OpStatus.AWAITING_CONFIRMATION,
        }[plan.kind]
        prompt = None
        if plan.kind == "confirm" and plan.declaration is not None:
            prompt = _prompt(plan.declaration, plan.arguments, plan.detail)
        return Outcome(
            operation_id=plan.operation_id,
            tool=plan.tool,
            status=status.value,
            batch_id=batch_id,
            intent_key=plan.intent_key,
            reason=plan.reason,
            detail=plan.detail,
            prompt=prompt,
            subject_key=plan.subject_key,
            supersedes=plan.supersedes if plan.kind != "reject" else (),
        )

    # -- follow-ups: confirmation, cancellation, compensation ------------------------------
    async def confirm(self, ctx: TurnContext, operation_id: str, *, accept: bool) -> Outcome:
        """The user's yes or no to an operation awaiting confirmation."""
        subject = self._topology.operation_subject(ctx.session_id, operation_id)
        loaded = await load(
            self._js,
            self._topology.stream_name(Context.OPERATIONS),
            subject,
            OPERATIONS,
            operation.evolve,
        )
        state = loaded.state
        if state is None or state.status is not OpStatus.AWAITING_CONFIRMATION:
            status = state.status.value if state else "unknown"
            return Outcome(
                operation_id,
                state.tool if state else "",
                status,
                state.batch_id if state else None,
                reason="not_awaiting_confirmation",
                existing=True,
            )
        declaration = self._registry.tool(state.tool)
        now = self._clock()
        plan = _Plan(
            "admit",
            state.tool,
            operation_id,
            None,
            declaration,
            dict(state.arguments),
            state.intent_key,
            state.subject_key,
        )
        events: list[Any]
        if not accept:
            events = [
                OperationRejected(
                    tool=state.tool, reason="confirmation_declined", detail="the user said no"
                )
            ]
        else:
            if plan.intent_key:
                claimed = await self._claim(plan)
                if claimed.operation_id != operation_id or claimed.kind != "admit":
                    # The user explicitly confirmed a repeat: it is a new intent of its own.
                    plan.intent_key = f"{plan.intent_key}~{operation_id}"
                    await self._intents.create(
                        plan.intent_key, f"{operation_id}|{digest(plan.arguments)}".encode()
                    )
            events = [OperationConfirmed(), self._admitted(ctx, declaration, plan.arguments, now)]
        expected = loaded.last_seq
        for event in events:
            env = self._envelope(ctx, plan, state.batch_id, event, now)
            ack = await append(
                self._js, OPERATIONS, subject, env, expected_last_subject_seq=expected
            )
            self._view.apply(env, ack.seq)
            expected = ack.seq
        if accept:
            metrics.OPERATIONS_ADMITTED.labels(state.tool).inc()
        else:
            metrics.OPERATIONS_REJECTED.labels(state.tool, "confirmation_declined").inc()
        final = OpStatus.ADMITTED if accept else OpStatus.REJECTED
        return Outcome(operation_id, state.tool, final.value, state.batch_id, plan.intent_key)

    async def _supersede(self, ctx: TurnContext, older: str, newer: str) -> None:
        """Cancel what has not happened; compensate what already has (the result is stale)."""
        outcome = await self.request_cancel(ctx, older, reason=f"superseded by {newer}")
        if outcome.status == OpStatus.COMMITTED.value:
            await self.compensate(ctx, older)

    async def request_cancel(self, ctx: TurnContext, operation_id: str, *, reason: str) -> Outcome:
        """An explicit cancellation request ("don't do the transfer").

        The request itself is a control event; its effect on the operation is decided here
        and appended at once: `cancel_requested` (the worker then cancels for real and only
        a confirmed state says "cancelled"), or a refusal with the compensation on offer.
        """
        now = self._clock()
        cancel = OperationCancel(reason=reason, requested_by=ctx.user_id)
        request = self._env(ctx, cancel, now, operation_id=operation_id)
        await append(self._js, CONTROL, self._topology.control_subject(ctx.session_id), request)
        subject = self._topology.operation_subject(ctx.session_id, operation_id)
        for _ in range(10):
            loaded = await load(
                self._js,
                self._topology.stream_name(Context.OPERATIONS),
                subject,
                OPERATIONS,
                operation.evolve,
            )
            state = loaded.state
            if state is None:
                return Outcome(operation_id, "", "unknown", None, reason="unknown_operation")
            event: Any
            if state.status is OpStatus.CANCEL_REQUESTED:
                return Outcome(
                    operation_id, state.tool, state.status.value, state.batch_id, existing=True
                )
            if state.terminal:
                committed = state.status is OpStatus.COMMITTED
                compensation = (
                    self._registry.tool(state.tool).compensating_tool if committed else None
                )
                event = OperationCancelRefused(
                    reason="already committed" if committed else f"already {state.status.value}",
                    compensating_tool=compensation,
                )
            else:
                event = OperationCancelRequested(requested_by=ctx.user_id, reason=reason)
            env = self._env(
                ctx,
                event,
                now,
                operation_id=operation_id,
                intent_key=state.intent_key,
                batch_id=state.batch_id,
                causation_id=request.event_id,
            )
            try:
                ack = await append(
                    self._js, OPERATIONS, subject, env, expected_last_subject_seq=loaded.last_seq
                )
            except ConcurrencyConflict:
                continue
            self._view.apply(env, ack.seq)
            if isinstance(event, OperationCancelRequested):
                metrics.CANCELLATIONS_REQUESTED.labels(state.tool).inc()
                return Outcome(
                    operation_id, state.tool, OpStatus.CANCEL_REQUESTED.value, state.batch_id
                )
            return Outcome(
                operation_id,
                state.tool,
                state.status.value,
                state.batch_id,
                reason="not_cancellable",
                detail=event.reason,
            )
        return Outcome(operation_id, "", "unknown", None, reason="cancel_raced")

    async def compensate(self, ctx: TurnContext, operation_id: str) -> Outcome:
        """Undo a committed operation with its declared compensating tool, as a new operation."""
        subject = self._topology.operation_subject(ctx.session_id, operation_id)
        loaded = await load(
            self._js,
            self._topology.stream_name(Context.OPERATIONS),
            subject,
            OPERATIONS,
            operation.evolve,
        )
        state = loaded.state
        if state is None or state.status is not OpStatus.COMMITTED:
            return Outcome(
                operation_id,
                state.tool if state else "",
                state.status.value if state else "unknown",
                state.batch_id if state else None,
                reason="not_committed",
                existing=True,
            )
        declaration = self._registry.tool(state.tool)
        if declaration.compensating_tool is None or declaration.compensation_arguments is None:
            return Outcome(
                operation_id,
                state.tool,
                state.status.value,
                state.batch_id,
                reason="not_compensable",
                existing=True,
            )
        if state.compensated_by:
            existing = self._view.get(state.compensated_by)
            return Outcome(
                state.compensated_by,
                declaration.compensating_tool,
                existing.status.value if existing else OpStatus.ADMITTED.value,
                existing.batch_id if existing else None,
                existing=True,
            )
        comp = self._registry.tool(declaration.compensating_tool)
        arguments = declaration.compensation_arguments(state.arguments, state.result or {})
        now = self._clock()
        plan = _Plan(
            "admit",
            comp.name,
            self._new_id("op"),
            None,
            comp,
            arguments,
            intent_key(ctx.tenant_id, ctx.user_id, comp.name, arguments),
        )
        plan = await self._claim(plan)
        if plan.kind != "admit":
            return self._outcome(plan, None, ctx.session_id)
        batch_id = self._new_id("batch")
        opened = self._envelope(
            ctx, plan, batch_id, BatchOpened(operation_ids=(plan.operation_id,)), now
        )
        await append(
            self._js,
            BATCHES,
            self._topology.batch_subject(ctx.session_id, batch_id),
            opened,
            expected_last_subject_seq=0,
        )
        env = self._envelope(
            ctx,
            plan,
            batch_id,
            self._admitted(ctx, comp, arguments, now, compensates=operation_id),
            now,
        )
        ack = await append(
            self._js,
            OPERATIONS,
            self._topology.operation_subject(ctx.session_id, plan.operation_id),
            env,
            expected_last_subject_seq=0,
        )
        self._view.apply(env, ack.seq)
        linked = OperationCompensated(compensation_operation_id=plan.operation_id)
        link = self._env(ctx, linked, now, operation_id=operation_id)
        await append(self._js, OPERATIONS, subject, link, expected_last_subject_seq=loaded.last_seq)
        metrics.COMPENSATIONS.labels(state.tool).inc()
        return Outcome(
            plan.operation_id, comp.name, OpStatus.ADMITTED.value, batch_id, plan.intent_key
        )


async def _same(plan: _Plan) -> _Plan:
    return plan


def _prompt(declaration: ToolDeclaration, arguments: dict[str, Any], detail: str) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in sorted(arguments.items()) if not k.startswith("_"))
    repeat = " You already did this once; do it again?" if detail.startswith("repeats") else ""
    return f"Please confirm {declaration.name} ({shown}).{repeat}"
