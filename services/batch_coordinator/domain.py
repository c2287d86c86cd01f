"""The coordinator's pure parts: which events settle a member, and the closing's words.

A batch whose members all committed closes with a fixed template (no model call, nothing
to vary); only final failures go through the model, which must offer an alternative.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import msgspec

from libs.domain.batch import BatchState, MemberStatus
from libs.domain.operation import RECONCILED_FAILURE, final_failure, rejection_failure
from libs.events import (
    Envelope,
    OperationAdmitted,
    OperationCancelled,
    OperationCommitted,
    OperationConfirmed,
    OperationEvent,
    OperationFailedFinal,
    OperationProgress,
    OperationReconciled,
    OperationRejected,
    OperationRequested,
    OperationRetryScheduled,
    OperationUnknown,
)
from libs.models import OperationOutcome
from libs.tools import ToolDeclaration
from libs.tools.labels import label_of

# The operation events the coordinator's consumer asks the broker for: the kinds
# `evolve_member` reads, plus progress (a note), less the admission. The terminal kinds
# settle a member; the kinds that set an operation's failure before it ends word a
# cancelled member's detail; a request or a rejection can be a member's only opening. What
# an admission says (tool, arguments, priority) `batch.opened` already names for every
# member (`opened_from_batch`), so it stays on the broker with every kind that sets nothing
# a closing reads (started, attempted, awaiting confirmation, cancel requests and refusals,
# compensation, dead letters): a three-operation turn delivers 3, not 9. A confirmation
# says a request became an admission, whose priority the batch names. Start-up replays
# read the whole stream, admissions included.
COORDINATED: tuple[type[OperationEvent], ...] = (
    OperationRequested,
    OperationConfirmed,
    OperationRejected,
    OperationProgress,
    OperationRetryScheduled,
    OperationUnknown,
    OperationReconciled,
    OperationCommitted,
    OperationFailedFinal,
    OperationCancelled,
)


class Worded(Protocol):
    """What a closing reads of a member: an operation's full state or its member view."""

    @property
    def tool(self) -> str: ...
    @property
    def arguments(self) -> Mapping[str, Any]: ...
    @property
    def priority(self) -> str: ...
    @property
    def result(self) -> Mapping[str, Any] | None: ...
    @property
    def failure(self) -> str | None: ...


class MemberView(msgspec.Struct, frozen=True, kw_only=True):
    """One batch member as the closing sees it, folded from the kinds in `COORDINATED`.

    Unlike the operation's state machine it refuses nothing: any order, a duplicate (a
    callback twice) or a kind it does not read leaves a view it can still word. The first
    terminal kind settles it, as the batch's settlement takes the first terminal event.
    """

    operation_id: str
    session_id: str
    batch_id: str | None = None
    tool: str = ""
    arguments: dict[str, Any] = {}
    priority: str = "normal"
    # An opening kind (requested, admitted, rejected) was folded: without one the view
    # does not know what the operation was, and the closing loads the operation instead.
    opened: bool = False
    admitted: bool = False
    # A request the user confirmed: its admission follows, with the batch's priority.
    confirmed: bool = False
    status: MemberStatus | None = None
    result: dict[str, Any] | None = None
    failure: str | None = None


def evolve_member(view: MemberView | None, env: Envelope[OperationEvent]) -> MemberView:
    """Fold one operation event into its member view; kinds it does not read change nothing."""
    if view is None:
        view = MemberView(
            operation_id=env.operation_id or "", session_id=env.session_id, batch_id=env.batch_id
        )
    replace = msgspec.structs.replace
    event = env.event
    settled = view.status is not None
    match event:
        case OperationAdmitted():
            # The admission's words are the operation's, whatever came before it.
            return replace(
                view, tool=event.tool, arguments=event.arguments, priority=event.priority,
                opened=True, admitted=True, batch_id=env.batch_id or view.batch_id,
            )
        case OperationConfirmed():
            return replace(view, confirmed=True)
        case OperationRequested(tool=tool, arguments=arguments) if not view.admitted:
            # A rejection's own tool name outranks the request's, as in the state machine.
            return replace(view, tool=view.tool or tool, arguments=arguments, opened=True)
        case OperationRejected(tool=tool) if not settled:
            return replace(
                view,
                tool=view.tool if view.admitted or not tool else tool,
                opened=True,
                status="rejected",
                failure=rejection_failure(event),
            )
        case OperationCommitted(result=result) if not settled:
            return replace(view, status="committed", result=result, failure=None)
        case OperationFailedFinal() if not settled:
            return replace(view, status="failed_final", failure=final_failure(event))
        case OperationCancelled() if not settled:
            # The detail is whatever failure the operation last had (a retry, an unknown).
            return replace(view, status="cancelled")
        case OperationRetryScheduled(reason=reason) | OperationUnknown(reason=reason) if (
            not settled
        ):
            return replace(view, failure=reason)
        case OperationReconciled() if not settled:
            return replace(view, failure=RECONCILED_FAILURE)
        case _:
            pass
    return view


def opened_from_batch(
    view: MemberView | None, state: BatchState, operation_id: str
) -> MemberView | None:
    """A member worded with what its batch's opening names, for what it was not delivered.

    `batch.opened` names each member's tool, arguments and priority as its admission does.
    A member with no opening kind of its own was admitted directly: it takes all three. A
    confirmed request keeps its own words and takes the admission's priority. A folded
    admission (a replay), an unconfirmed request and a rejection keep their own words. What
    the member's own events added (its settlement, result or failure) is kept. None or an
    unopened view when the batch predates those names: the closing loads the member.
    """
    if view is not None and (view.admitted or (view.opened and not view.confirmed)):
        return view
    named = len(state.arguments) == len(state.priorities) == len(state.members)
    if operation_id not in state.members or not named:
        # A confirmed request with no priority to take is not worded blind.
        return msgspec.structs.replace(view, opened=False) if view is not None else None
    index = state.members.index(operation_id)
    priority = state.priorities[index]
    if view is not None and view.opened:
        return msgspec.structs.replace(view, priority=priority)
    base = view or MemberView(
        operation_id=operation_id, session_id=state.session_id, batch_id=state.batch_id
    )
    return msgspec.structs.replace(
        base,
        tool=state.tools[index],
        arguments=dict(state.arguments[index]),
        priority=priority,
        opened=True,
    )


def silent_members(
    state: BatchState, heard: Callable[[str], bool], now: datetime, grace: timedelta
) -> list[tuple[str, str]]:
    """Members of an open batch with no event `grace` after its opening, with their tools.

    Admission appends `batch.opened` and then each member's first event; a member still
    silent long after lost its turn in between (a surface killed), and nothing will admit it.
    """
    if state.closed or state.opened_at is None or now - state.opened_at < grace:
        return []
    tools = dict(zip(state.members, state.tools, strict=False))
    return [
        (m, tools.get(m, "")) for m in state.members if m not in state.settled and not heard(m)
    ]


def progress_delivery_id(operation_event_id: str) -> str:
    """A progress note's delivery id, derived from the progress event so a redelivery repeats it."""
    digest = hashlib.sha256(f"progress:{operation_event_id}".encode()).hexdigest()[:24]
    return f"prg-{digest}"


def outcome_of(
    operation_id: str,
    status: MemberStatus,
    state: Worded | None,
    declaration: ToolDeclaration | None = None,
) -> OperationOutcome:
    """A member's outcome for the summary; the batch's settled status is authoritative."""
    if state is None:
        return OperationOutcome(
            operation_id=operation_id, tool="", label=operation_id, status=status
        )
    detail = state.failure or ""
    line = ""
    if status == "committed" and declaration is not None and declaration.closing is not None:
        try:
            line = declaration.closing(state.arguments, state.result or {})
        except (KeyError, TypeError, ValueError):
            # The result lacks a field the template names: the label still says what was done.
            line = ""
    elif status in ("failed_final", "rejected") and declaration is not None and declaration.failure:
        why = detail.split(":", 1)[-1].strip() or status.replace("_", " ")
        try:
            line = declaration.failure(state.arguments, why)
        except (KeyError, TypeError, ValueError):
            # An argument the template names was left out: the templates' words instead.
            line = ""
    return OperationOutcome(
        operation_id=operation_id,
        tool=state.tool,
        label=label_of(declaration, state.arguments),
        status=status,
        detail=detail if status != "committed" else "",
        line=line,
    )


def needs_model(outcomes: Sequence[OperationOutcome]) -> bool:
    """Final failures need explaining with an alternative; success and cancels do not."""
    return any(o.status in ("failed_final", "rejected") for o in outcomes)


def _join(items: Sequence[str], conjunction: str) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} {conjunction} {items[-1]}"


def template_summary(outcomes: Sequence[OperationOutcome], language: str) -> str:
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


def short_summary(outcomes: Sequence[OperationOutcome], language: str) -> str:
    """The shorter form, said again when the first try went unheard."""
    spanish = language.lower().startswith("es")
    total = len(outcomes)
    done = sum(1 for o in outcomes if o.status == "committed")
    if done == total:
        return "Todo listo." if spanish else "All done."
    if spanish:
        return f"{done} de {total} completadas."
    return f"{done} of {total} done."


def priority_of(states: Sequence[Worded | None]) -> Literal["normal", "urgent"]:
    """Urgent when any member was declared urgent by its tool's policy (never by the model)."""
    return "urgent" if any(s is not None and s.priority == "urgent" for s in states) else "normal"
