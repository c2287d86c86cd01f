"""The coordinator's pure parts: which events settle a member, and the closing's words.

A batch whose members all committed closes with a fixed template (no model call, nothing
to vary); only final failures go through the model, which must offer an alternative.
"""

from __future__ import annotations

import hashlib
import typing
from collections.abc import Sequence
from typing import Literal

from libs.domain.batch import MemberStatus
from libs.domain.operation import OperationState
from libs.events import (
    OperationAttempted,
    OperationCancelled,
    OperationCommitted,
    OperationEvent,
    OperationFailedFinal,
    OperationRejected,
)
from libs.models import Outcome
from libs.tools import ToolDeclaration
from libs.tools.labels import label_of

# The operation events the coordinator's consumer asks the broker for: all but
# `operation.attempted`. Terminal kinds settle a member and progress becomes a note, but the
# closing's words (tool, arguments, result, failure) come from the operation state folded by
# `evolve`, which refuses a kind the status does not allow (a commit needs the start before
# it): every kind that moves the status stays. An attempt moves none and sets only fields the
# closing does not read (attempts, provider_ref, awaiting_async, last_attempt_at).
COORDINATED: tuple[type[OperationEvent], ...] = tuple(
    t for t in typing.get_args(OperationEvent) if t is not OperationAttempted
)


def member_status(event: OperationEvent) -> MemberStatus | None:
    """The terminal status an operation event settles a member with, if any."""
    match event:
        case OperationCommitted():
            return "committed"
        case OperationFailedFinal():
            return "failed_final"
        case OperationCancelled():
            return "cancelled"
        case OperationRejected():
            return "rejected"
        case _:
            return None


def progress_delivery_id(operation_event_id: str) -> str:
    """A progress note's delivery id, derived from the progress event so a redelivery repeats it."""
    digest = hashlib.sha256(f"progress:{operation_event_id}".encode()).hexdigest()[:24]
    return f"prg-{digest}"


def outcome_of(
    operation_id: str,
    status: MemberStatus,
    state: OperationState | None,
    declaration: ToolDeclaration | None = None,
) -> Outcome:
    """A member's outcome for the summary; the batch's settled status is authoritative."""
    if state is None:
        return Outcome(operation_id=operation_id, tool="", label=operation_id, status=status)
    detail = state.failure or ""
    line = ""
    if status == "committed" and declaration is not None and declaration.closing is not None:
        try:
            line = declaration.closing(state.arguments, state.result or {})
        except (KeyError, TypeError, ValueError):
            # The result lacks a field the template names: the label still says what was done.
            line = ""
    return Outcome(
        operation_id=operation_id,
        tool=state.tool,
        label=label_of(declaration, state.arguments),
        status=status,
        detail=detail if status != "committed" else "",
        line=line,
    )


def needs_model(outcomes: Sequence[Outcome]) -> bool:
    """Final failures need explaining with an alternative; success and cancels do not."""
    return any(o.status in ("failed_final", "rejected") for o in outcomes)


def _join(items: Sequence[str], conjunction: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


def template_summary(outcomes: Sequence[Outcome], language: str) -> str:
    """The closing when nothing failed: what was done, and what was cancelled as asked."""
    spanish = language.lower().startswith("es")
    conj = "y" if spanish else "and"
    done = [o.label for o in outcomes if o.status == "committed" and not o.line]
    lines = [o.line for o in outcomes if o.status == "committed" and o.line]
    cancelled = [o.label for o in outcomes if o.status == "cancelled"]
    parts: list[str] = []
    if done:
        parts.append(
            f"Listo: {_join(done, conj)}, completado." if spanish
            else f"All done: {_join(done, conj)}."
        )
    parts.extend(lines)
    if cancelled:
        parts.append(
            f"Cancelado como pediste: {_join(cancelled, conj)}." if spanish
            else f"Cancelled as you asked: {_join(cancelled, conj)}."
        )
    return " ".join(parts)


def short_summary(outcomes: Sequence[Outcome], language: str) -> str:
    """The shorter form, said again when the first try went unheard."""
    spanish = language.lower().startswith("es")
    total = len(outcomes)
    done = sum(1 for o in outcomes if o.status == "committed")
    if done == total:
        return "Todo listo." if spanish else "All done."
    if spanish:
        return f"{done} de {total} completadas."
    return f"{done} of {total} done."


def priority_of(states: Sequence[OperationState | None]) -> Literal["normal", "urgent"]:
    """Urgent when any member was declared urgent by its tool's policy (never by the model)."""
    return "urgent" if any(s is not None and s.priority == "urgent" for s in states) else "normal"
