"""What admission tells its caller about one plan (pure)."""

from __future__ import annotations

from libs.domain import OperationState, OpStatus

from .plan_types import ELSEWHERE, AdmissionOutcome, Plan
from .writes import prompt


def outcome(
    plan: Plan, batch_id: str | None, session_id: str, state: OperationState | None
) -> AdmissionOutcome:
    """What the caller is told about one plan; `state` is the joined operation's, if any."""
    if plan.existing is not None or plan.kind == "existing":
        state = plan.existing or state
        # The same intent asked in another session of the user joins that session's
        # operation; its closing goes there, so this session must not be promised one.
        elsewhere = state is not None and state.session_id != session_id
        return AdmissionOutcome(
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
    shown = None
    if plan.kind == "confirm" and plan.declaration is not None:
        shown = prompt(plan.declaration, plan.arguments, plan.detail)
    return AdmissionOutcome(
        operation_id=plan.operation_id,
        tool=plan.tool,
        status=status.value,
        batch_id=batch_id,
        intent_key=plan.intent_key,
        reason=plan.reason,
        detail=plan.detail,
        prompt=shown,
        subject_key=plan.subject_key,
        supersedes=plan.supersedes if plan.kind != "reject" else (),
    )
