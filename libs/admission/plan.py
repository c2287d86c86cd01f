"""Pure admission planning: what a turn's proposed tool calls become, before any I/O.

Validation, authorisation, business limits, the duplicate policy, supersession and the
backpressure decision all happen here. Everything the planner needs to know about live
operations is read from a `PlanView` (the load view in production, a plain object in unit
tests); capacity is read, never reserved: the plans say which reservations they need and
the shell takes them. The clock value and the id factory are parameters.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from libs.domain import OperationState, OpStatus
from libs.events import RejectReason
from libs.tools import Caller, ToolDeclaration, ToolRegistry, UnknownTool

from . import rules
from .intent import digest, intent_key, subject_key
from .plan_types import (
    REUSABLE,
    AdmissionPlan,
    NewId,
    Plan,
    PlanView,
    Reservation,
    ToolCall,
    TurnContext,
)
from .rules import Load

_HOUR = timedelta(hours=1)


def plan_admission(
    ctx: TurnContext,
    calls: list[ToolCall],
    *,
    registry: ToolRegistry,
    view: PlanView,
    now: datetime,
    new_id: NewId,
) -> AdmissionPlan:
    """Plan every proposed call of a turn; repeats within the turn map onto one plan."""
    held: Counter[Reservation] = Counter()
    plans: list[Plan] = []
    seen: dict[str, Plan] = {}
    for call in calls:
        for plan in _plan_call(
            ctx, call, registry=registry, view=view, now=now, new_id=new_id, held=held
        ):
            twin = seen.get(plan.intent_key or "")
            if twin is not None:
                # The model asked for the same thing twice in one turn: one operation.
                plans.append(replace(twin, kind="existing", tool_call_id=plan.tool_call_id))
                continue
            if plan.intent_key:
                seen[plan.intent_key] = plan
            plans.append(plan)
    reservations = list(held.elements())
    return AdmissionPlan(tuple(plans), tuple(reservations))


def _plan_call(
    ctx: TurnContext,
    call: ToolCall,
    *,
    registry: ToolRegistry,
    view: PlanView,
    now: datetime,
    new_id: NewId,
    held: Counter[Reservation],
) -> list[Plan]:
    def reject(reason: RejectReason, detail: str) -> Plan:
        return Plan(
            "reject", call.tool, new_id("op"), call.tool_call_id, reason=reason, detail=detail
        )

    try:
        declaration = registry.tool(call.tool)
    except UnknownTool:
        return [reject("unknown_tool", f"no tool named {call.tool!r}")]
    caller = Caller(ctx.tenant_id, ctx.user_id, ctx.agent)
    if declaration.internal:
        return [reject("unknown_tool", f"{call.tool} is not offered to agents")]
    if refusal := rules.agent_allowed(declaration, caller):
        return [reject(*refusal)]
    if down := registry.unavailable(call.tool):
        return [reject("tool_unavailable", down)]
    items = rules.expand(declaration, call.arguments)
    if isinstance(items, tuple):
        return [reject(*items)]
    plans: list[Plan] = []
    for raw in items:
        plan = _plan_item(
            ctx,
            caller,
            declaration,
            raw,
            call.tool_call_id,
            view=view,
            now=now,
            new_id=new_id,
            held=held,
        )
        if plan.kind == "admit":
            # Every admitted item counts against the capacity of the items planned after it.
            held[(declaration.name, ctx.tenant_id, ctx.user_id)] += 1
        plans.append(plan)
    return plans


def _plan_item(
    ctx: TurnContext,
    caller: Caller,
    declaration: ToolDeclaration,
    raw: dict[str, Any],
    tool_call_id: str | None,
    *,
    view: PlanView,
    now: datetime,
    new_id: NewId,
    held: Counter[Reservation],
) -> Plan:
    plan = Plan("admit", declaration.name, new_id("op"), tool_call_id, declaration)
    checked = rules.check_item(declaration, raw, caller)
    if isinstance(checked, tuple):
        return replace(plan, kind="reject", reason=checked[0], detail=checked[1])
    plan.arguments = checked
    plan.intent_key = intent_key(ctx.tenant_id, ctx.user_id, declaration.name, checked)
    plan.subject_key = subject_key(
        ctx.tenant_id, ctx.user_id, declaration.name, declaration.subject_key_fields, checked
    )
    recent = view.recent(declaration.name, ctx.user_id, now, _HOUR)
    if refusal := rules.business_limits(declaration, checked, recent):
        return replace(plan, kind="reject", reason=refusal[0], detail=refusal[1])
    existing = view.by_intent(plan.intent_key)
    if existing is not None and existing.status not in REUSABLE:
        return on_duplicate(plan, existing)
    if declaration.duplicate_policy == "replace" and plan.subject_key:
        # Older intents on the same subject that still stand (running or done):
        # the new one replaces them, for real, at the system of record too.
        older = view.on_subject(ctx.session_id, plan.subject_key)
        plan.supersedes = tuple(
            s.operation_id
            for s in older
            if s.intent_key != plan.intent_key
            and s.status not in REUSABLE
            and s.compensated_by is None
        )
    base = view.load(declaration.name, ctx.tenant_id, ctx.user_id)
    return _plan_capacity(ctx, plan, declaration, view, _with_held(base, declaration, ctx, held))


def _with_held(
    base: Load, declaration: ToolDeclaration, ctx: TurnContext, held: Counter[Reservation]
) -> Load:
    """The view's load plus what this turn has planned but not written yet.

    A turn has one tenant and one user, so what it holds counts in every scope.
    """
    n = held[(declaration.name, ctx.tenant_id, ctx.user_id)]
    return Load(
        global_open=base.global_open + n,
        tenant_open=base.tenant_open + n,
        user_open=base.user_open + n,
    )


def on_duplicate(plan: Plan, existing: OperationState) -> Plan:
    """Apply the tool's duplicate policy to a repeat of a standing intent."""
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


def _plan_capacity(
    ctx: TurnContext, plan: Plan, declaration: ToolDeclaration, view: PlanView, load_now: Load
) -> Plan:
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
                twin = view.open_with_digest(
                    ctx.tenant_id, declaration.name, digest(plan.arguments)
                )
                if twin is None:
                    return replace(plan, kind="reject", reason="backpressure", detail=over)
                return replace(plan, kind="existing", operation_id=twin.operation_id, existing=twin)
            case "degrade":
                plan.arguments = {**plan.arguments, "_degraded": True}
    if declaration.needs_confirmation and plan.kind == "admit":
        plan.kind = "confirm"
    return plan


# -- after the claims ----------------------------------------------------------------------
def claim_value(plan: Plan) -> bytes:
    """What a claim of the plan's intent stores: the holder and its argument digest."""
    return f"{plan.operation_id}|{digest(plan.arguments)}".encode()


def reused_key(plan: Plan, held_digest: str) -> Plan | None:
    """A held claim whose arguments differ: the key was reused for another request."""
    if held_digest == digest(plan.arguments):
        return None
    return replace(
        plan, kind="reject", reason="duplicate", detail="intent key reused with other arguments"
    )


def on_held_claim(plan: Plan, holder: str, state: OperationState | None) -> Plan | None:
    """What a plan becomes when another holds its intent; None: retake the claim."""
    if state is None:
        # Claimed by an admission that crashed before writing events: adopt its id.
        return replace(plan, operation_id=holder)
    if state.status in REUSABLE:
        return None
    return on_duplicate(plan, state)


def fresh(plans: list[Plan]) -> list[Plan]:
    """The plans that write events of their own (members of the turn's batch)."""
    return [p for p in plans if p.kind in ("admit", "reject", "confirm") and p.existing is None]
