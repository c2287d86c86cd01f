"""What an external model is told about each call: started, refused or waiting, never done."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from libs.admission import ELSEWHERE, AdmissionOutcome

from .tool_formats import CONFIRM_TOOL, Prepared

# --------------------------------------------------------------------------- outputs


def _what(outcome: AdmissionOutcome, label: str = "") -> str:
    about = f" for {label}" if label else ""
    return f"{outcome.tool}{about} (operation {outcome.operation_id})"


_UNDER_WAY = (
    "Tell the user it is under way, not that it is done; holdline says when the result "
    "is ready."
)


def output_line(outcome: AdmissionOutcome, label: str = "") -> str:
    """What the model is told about one item: started, refused or waiting; never done."""
    status, what = outcome.status, _what(outcome, label)
    if outcome.reason == ELSEWHERE:
        return (
            f"Already in progress in another conversation of this user: {what}, {status}; "
            "no second request was made and its result is reported there."
        )
    if outcome.existing:
        return f"Already requested earlier: {what} is {status}; no second request was made."
    if status == "rejected":
        reason = outcome.reason or "refused"
        detail = f": {outcome.detail}" if outcome.detail else ""
        return f"Refused: {what} was not done ({reason}{detail})."
    if status == "awaiting_confirmation":
        prompt = outcome.prompt or f"Please confirm {outcome.tool}."
        return (
            f"Needs the user's confirmation, nothing was done yet: {prompt} Ask the user, "
            f"then call {CONFIRM_TOOL} with operation_id={outcome.operation_id} and "
            "confirmed=true or false."
        )
    return f"Accepted: {what} has started and is not finished."


def output_text(outcomes: Sequence[AdmissionOutcome], labels: Sequence[str]) -> str:
    """One call's output: a line per item, and what to tell the user when work started."""
    lines = [
        output_line(o, labels[i] if i < len(labels) else "") for i, o in enumerate(outcomes)
    ]
    started = any(
        not o.existing and o.status not in ("rejected", "awaiting_confirmation")
        for o in outcomes
    )
    return " ".join([*lines, _UNDER_WAY] if started else lines)


def labels(call: Prepared) -> list[str]:
    """What each item of a call is about, in the words of its arguments."""
    declaration = call.declaration
    if declaration is not None and declaration.batch_field:
        return [str(item) for item in call.arguments.get(declaration.batch_field, [])]
    shown = ", ".join(f"{k}={v}" for k, v in sorted(call.arguments.items()))
    return [shown]


def confirm_line(outcome: AdmissionOutcome, accepted: bool) -> str:
    """What the model is told about a confirmation."""
    if outcome.reason == "not_awaiting_confirmation":
        return f"Nothing to confirm: {_what(outcome)} is {outcome.status}."
    if outcome.reason:
        return f"Nothing to confirm: {outcome.reason}."
    if not accepted:
        return f"Declined: {_what(outcome)} will not be done."
    return f"Confirmed: {_what(outcome)} has started and is not finished. {_UNDER_WAY}"


def operation_ref(o: AdmissionOutcome) -> dict[str, Any]:
    """An operation a call created or joined, as the answer lists it."""
    return {"operation_id": o.operation_id, "tool": o.tool, "status": o.status,
            "batch_id": o.batch_id}
