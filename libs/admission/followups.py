"""Pure deciders for what follows admission: confirmation, cancellation, compensation.

Each takes the operation's loaded state (and `now`, ids) and returns either the events to
append or the answer to give without appending anything. The shell in `admission.py`
loads, calls these, claims intents and appends.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from libs.domain import OperationState, OpStatus
from libs.events import (
    OperationCancelRefused,
    OperationCancelRequested,
    OperationConfirmed,
    OperationEvent,
    OperationRejected,
)
from libs.tools import ToolDeclaration

from .intent import intent_key
from .plan_types import AdmissionOutcome, NewId, Plan, TurnContext
from .writes import admitted


def confirm_refusal(operation_id: str, state: OperationState | None) -> AdmissionOutcome | None:
    """The answer when there is nothing to confirm; None when the operation awaits it."""
    if state is not None and state.status is OpStatus.AWAITING_CONFIRMATION:
        return None
    return AdmissionOutcome(
        operation_id,
        state.tool if state else "",
        state.status.value if state else "unknown",
        state.batch_id if state else None,
        reason="not_awaiting_confirmation",
        existing=True,
    )


def confirm_plan(state: OperationState, declaration: ToolDeclaration) -> Plan:
    """The plan standing for an operation the user is answering."""
    return Plan(
        "admit",
        state.tool,
        state.operation_id,
        None,
        declaration,
        dict(state.arguments),
        state.intent_key,
        state.subject_key,
    )


def repeat_key(plan: Plan, operation_id: str) -> str:
    """An explicitly confirmed repeat is a new intent of its own, keyed apart."""
    return f"{plan.intent_key}~{operation_id}"


def decide_confirm(
    ctx: TurnContext, plan: Plan, *, accept: bool, now: datetime
) -> list[OperationEvent]:
    """The events of the user's yes or no."""
    if not accept:
        return [
            OperationRejected(
                tool=plan.tool, reason="confirmation_declined", detail="the user said no"
            )
        ]
    assert plan.declaration is not None
    return [OperationConfirmed(), admitted(ctx, plan.declaration, plan.arguments, now)]


def confirmed(state: OperationState, plan: Plan, *, accept: bool) -> AdmissionOutcome:
    """The answer after the user's yes or no was written."""
    final = OpStatus.ADMITTED if accept else OpStatus.REJECTED
    return AdmissionOutcome(
        state.operation_id, state.tool, final.value, state.batch_id, plan.intent_key
    )


@dataclass(frozen=True, slots=True)
class CancelDecision:
    """Either an event to append on the operation, or an answer with nothing to append."""

    event: OperationCancelRequested | OperationCancelRefused | None
    answer: AdmissionOutcome | None


def decide_cancel(
    operation_id: str,
    state: OperationState | None,
    *,
    user_id: str,
    reason: str,
    compensating_tool: str | None,
) -> CancelDecision:
    """What a cancellation request does to the operation as loaded.

    `compensating_tool` is the tool's declared compensation (offered when already committed).
    """
    if state is None:
        return CancelDecision(
            None, AdmissionOutcome(operation_id, "", "unknown", None, reason="unknown_operation")
        )
    if state.status is OpStatus.CANCEL_REQUESTED:
        return CancelDecision(
            None,
            AdmissionOutcome(
                operation_id, state.tool, state.status.value, state.batch_id, existing=True
            ),
        )
    if state.terminal:
        committed = state.status is OpStatus.COMMITTED
        return CancelDecision(
            OperationCancelRefused(
                reason="already committed" if committed else f"already {state.status.value}",
                compensating_tool=compensating_tool if committed else None,
            ),
            None,
        )
    return CancelDecision(OperationCancelRequested(requested_by=user_id, reason=reason), None)


def cancelled(
    operation_id: str,
    state: OperationState,
    event: OperationCancelRequested | OperationCancelRefused,
) -> AdmissionOutcome:
    """The answer after the cancellation's effect was written."""
    if isinstance(event, OperationCancelRequested):
        return AdmissionOutcome(
            operation_id, state.tool, OpStatus.CANCEL_REQUESTED.value, state.batch_id
        )
    return AdmissionOutcome(
        operation_id,
        state.tool,
        state.status.value,
        state.batch_id,
        reason="not_cancellable",
        detail=event.reason,
    )


CANCEL_RACED = "cancel_raced"


def needs_compensation(answer: AdmissionOutcome) -> bool:
    """A superseded operation already done is compensated; otherwise cancelling suffices."""
    return answer.status == OpStatus.COMMITTED.value


def compensation_refusal(
    operation_id: str,
    state: OperationState | None,
    declaration: ToolDeclaration | None,
    compensation: OperationState | None,
) -> AdmissionOutcome | None:
    """The answer when no new compensation is admitted; None when one is.

    `compensation` is the state of the compensation already linked, if any.
    """
    if state is None or state.status is not OpStatus.COMMITTED:
        return AdmissionOutcome(
            operation_id,
            state.tool if state else "",
            state.status.value if state else "unknown",
            state.batch_id if state else None,
            reason="not_committed",
            existing=True,
        )
    assert declaration is not None
    if declaration.compensating_tool is None or declaration.compensation_arguments is None:
        return AdmissionOutcome(
            operation_id,
            state.tool,
            state.status.value,
            state.batch_id,
            reason="not_compensable",
            existing=True,
        )
    if state.compensated_by:
        return AdmissionOutcome(
            state.compensated_by,
            declaration.compensating_tool,
            compensation.status.value if compensation else OpStatus.ADMITTED.value,
            compensation.batch_id if compensation else None,
            existing=True,
        )
    return None


def compensation_plan(
    ctx: TurnContext,
    state: OperationState,
    declaration: ToolDeclaration,
    comp: ToolDeclaration,
    new_id: NewId,
) -> Plan:
    """The new operation undoing a committed one with its declared compensating tool."""
    assert declaration.compensation_arguments is not None
    arguments = declaration.compensation_arguments(state.arguments, state.result or {})
    return Plan(
        "admit",
        comp.name,
        new_id("op"),
        None,
        comp,
        arguments,
        intent_key(ctx.tenant_id, ctx.user_id, comp.name, arguments),
    )


def compensation_admitted(
    ctx: TurnContext, plan: Plan, comp: ToolDeclaration, compensates: str, now: datetime
) -> OperationEvent:
    """The admission event of a compensation, linked to the operation it undoes."""
    return admitted(ctx, comp, plan.arguments, now, compensates=compensates)
