"""The events an admission plan writes, and the envelopes that carry them (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from libs.events import (
    BatchOpened,
    Envelope,
    OperationAdmitted,
    OperationAwaitingConfirmation,
    OperationEvent,
    OperationRejected,
    OperationRequested,
)
from libs.tools import ToolDeclaration

from .plan_types import Plan, TurnContext


def batch_opened(members: Sequence[Plan]) -> BatchOpened:
    """The batch of a turn's fresh plans, naming with each member what its closing says."""
    return BatchOpened(
        operation_ids=tuple(p.operation_id for p in members),
        tools=tuple(p.tool for p in members),
        arguments=tuple(p.arguments for p in members),
        priorities=tuple(
            p.declaration.priority if p.declaration is not None else "normal" for p in members
        ),
    )


def admitted(
    ctx: TurnContext,
    declaration: ToolDeclaration,
    arguments: dict[str, Any],
    now: datetime,
    compensates: str | None = None,
) -> OperationAdmitted:
    """The admission event of a tool call."""
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


def plan_events(ctx: TurnContext, plan: Plan, now: datetime) -> list[OperationEvent]:
    """The events a fresh plan writes on its operation's subject, in order."""
    match plan.kind:
        case "reject":
            return [
                OperationRejected(
                    tool=plan.tool, reason=plan.reason or "invalid_arguments", detail=plan.detail
                )
            ]
        case "confirm":
            assert plan.declaration is not None
            return [
                OperationRequested(tool=plan.tool, arguments=plan.arguments),
                OperationAwaitingConfirmation(
                    prompt=prompt(plan.declaration, plan.arguments, plan.detail)
                ),
            ]
        case _:
            assert plan.declaration is not None
            return [admitted(ctx, plan.declaration, plan.arguments, now)]


def envelope(
    ctx: TurnContext, event: Any, now: datetime, event_id: str, **ids: Any
) -> Envelope[Any]:
    """An envelope carrying the turn's identities plus the ones given."""
    return Envelope(
        event_id=event_id,
        occurred_at=now,
        session_id=ctx.session_id,
        turn_id=ctx.turn_id,
        agent=ctx.agent,
        event=event,
        **ids,
    )


def plan_ids(plan: Plan, batch_id: str | None) -> dict[str, Any]:
    """The identities every event of a plan carries."""
    return {
        "tool_call_id": plan.tool_call_id,
        "operation_id": plan.operation_id,
        "intent_key": plan.intent_key,
        "subject_key": plan.subject_key,
        "batch_id": batch_id,
    }


def prompt(declaration: ToolDeclaration, arguments: dict[str, Any], detail: str) -> str:
    """The confirmation question put to the user."""
    shown = ", ".join(f"{k}={v}" for k, v in sorted(arguments.items()) if not k.startswith("_"))
    repeat = " You already did this once; do it again?" if detail.startswith("repeats") else ""
    return f"Please confirm {declaration.name} ({shown}).{repeat}"
