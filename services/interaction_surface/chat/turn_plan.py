"""The chat turn's decisions, as pure functions; `turns.py` only executes them.

`plan_turn(session_view, model_result, now)` says what a turn does once the model has
answered: the explicit requests and proposed calls to put through admission (in order), or
the apology or question that replaces them. The steps after admission are pure too: which
pending updates this turn made stale (`stale_updates`), what each outcome tells the model
(`admission_note`), the reply text (`reply_text`) and the answer returned (`answer`, rebuilt
from the reply for a repeated client turn id: `answer_of_reply`), and how a turn begins
against its session's log (`opening`).
Nothing here reads the clock, makes an id or touches the broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from libs.admission import ELSEWHERE, AdmissionOutcome, ToolCall
from libs.domain import DeliveryState, OperationState, SessionState
from libs.domain.channel import OperationFacts
from libs.domain.relevance import Verdict, stale_after_turn
from libs.events import Envelope, RepliedOperation, TurnReplied
from libs.events.interaction import Channel
from libs.models.interface import AdmissionNote, PendingUpdate, ToolSpec, TurnReply, TurnRequest
from libs.models.phrasing import reply_language

from .conversation import (
    apology,
    history_for_model,
    language_of,
    live_operations,
    pending_updates,
    reworded,
    with_updates,
)

Label = Callable[[str, Mapping[str, Any]], str]


@dataclass(frozen=True, slots=True)
class SessionView:
    """What a turn reads about its session, taken once the turn is open."""

    session: SessionState
    context_from: int
    operations: Sequence[OperationState]
    deliveries: Sequence[DeliveryState]


@dataclass(frozen=True, slots=True)
class Cancel:
    operation_id: str


@dataclass(frozen=True, slots=True)
class Confirm:
    operation_id: str
    accept: bool


@dataclass(frozen=True, slots=True)
class Compensate:
    operation_id: str


@dataclass(frozen=True, slots=True)
class Admit:
    calls: tuple[ToolCall, ...]


Action = Cancel | Confirm | Compensate | Admit


@dataclass(frozen=True, slots=True)
class TurnPlan:
    """What the executor does after the model answered.

    `reply` is None when the model failed: nothing is admitted, every pending update
    rides on the `apology`. Otherwise `actions` go through admission in order.
    """

    reply: TurnReply | None
    actions: tuple[Action, ...]
    updates: tuple[PendingUpdate, ...]
    apology: str | None


def model_request(
    view: SessionView,
    *,
    text: str,
    turn_id: str,
    tools: Sequence[ToolSpec],
    label: Label,
    default_language: str,
    now: datetime,
    deadline: float,
) -> TurnRequest:
    """What the model sees for this turn (the history, and this turn's ephemeral context)."""
    session = view.session
    return TurnRequest(
        session_id=session.session_id,
        turn_id=turn_id,
        agent=session.agent,
        language=language_of(text, default_language),
        user_text=text,
        # The user's message of this turn is the last one: the model gets it separately.
        history=history_for_model(session.messages[:-1], view.context_from),
        tools=tools,
        live_operations=live_operations(view.operations, label),
        pending_updates=pending_updates(view.deliveries),
        today=now.date().isoformat(),
        deadline=deadline,
    )


def plan_turn(
    request: TurnRequest,
    model_result: TurnReply | None,
    now: datetime,
    *,
    question: str | None = None,
) -> TurnPlan:
    """The turn's actions once the model answered (None: it failed or timed out).

    `question` is the voice review's doubt about what was heard: misheard words must not
    reach a tool, so nothing is admitted and the question is the reply.
    """
    del now  # no decision of the turn depends on the time today; the contract carries it
    updates = tuple(request.pending_updates)
    if model_result is None:
        return TurnPlan(None, (), updates, apology(request.language))
    reply = model_result
    if question and reply.calls:
        reply = replace(reply, text=question, calls=(), attached=())
    actions: list[Action] = [Cancel(op) for op in reply.cancels]
    actions += [Confirm(op, accept) for op, accept in reply.confirmations]
    actions += [Compensate(op) for op in reply.compensations]
    if reply.calls:
        actions.append(
            Admit(tuple(ToolCall(c.tool, dict(c.arguments), c.call_id) for c in reply.calls))
        )
    return TurnPlan(reply, tuple(actions), updates, None)


def undone(results: Sequence[tuple[Action, AdmissionOutcome]]) -> dict[str, str]:
    """The operations this turn started undoing, each with its compensation.

    A refused undo answers with the operation itself; a started one with its compensation.
    """
    return {
        action.operation_id: outcome.operation_id
        for action, outcome in results
        if isinstance(action, Compensate) and outcome.operation_id != action.operation_id
    }


def stale_updates(
    session_id: str,
    updates: Sequence[PendingUpdate],
    delivery_of: Callable[[str], DeliveryState | None],
    outcomes: Sequence[AdmissionOutcome],
    undone_by: Mapping[str, str],
) -> tuple[list[PendingUpdate], list[tuple[str, Verdict]]]:
    """The pending updates still worth saying, and the refusal of each one made stale.

    The model saw the updates before admission; only now is it known which of them this
    turn's own requests made stale (a newer intent on its subject, an undo).
    """
    superseded_by = {
        older: OperationFacts(
            operation_id=o.operation_id,
            session_id=session_id,
            batch_id=o.batch_id,
            subject_key=o.subject_key,
        )
        for o in outcomes
        for older in o.supersedes
    }
    if not superseded_by and not undone_by:
        return list(updates), []
    live: list[PendingUpdate] = []
    refused: list[tuple[str, Verdict]] = []
    for update in updates:
        delivery = delivery_of(update.delivery_id)
        verdict = (
            stale_after_turn(delivery, superseded_by, undone_by) if delivery is not None else None
        )
        if verdict is None:
            live.append(update)
        else:
            refused.append((update.delivery_id, verdict))
    return live, refused


def admission_note(
    outcome: AdmissionOutcome, state: OperationState | None, session_id: str, label: Label
) -> AdmissionNote:
    """What the model is told about one outcome, to word the acceptance."""
    if state is not None and state.session_id != session_id and outcome.reason != ELSEWHERE:
        # An id from another session (a model may repeat any id): never name its resource.
        # Admission's join of the user's own intent from another session may: the user has
        # just asked for that very resource.
        state = None
    shown = label(outcome.tool, state.arguments) if state is not None else outcome.tool
    reason = outcome.reason
    if reason and outcome.detail:
        reason = f"{reason}: {outcome.detail}"
    return AdmissionNote(
        operation_id=outcome.operation_id,
        tool=outcome.tool,
        status=outcome.status,
        label=shown,
        reason=reason,
        prompt=outcome.prompt,
    )


def reworded_reply(
    request: TurnRequest, reply: TurnReply, attached: Sequence[PendingUpdate]
) -> tuple[TurnRequest, TurnReply]:
    """The request and reply as they stand for the attached updates only."""
    final_request = replace(request, pending_updates=tuple(attached))
    return final_request, reworded(
        reply, request.pending_updates, attached, reply_language(request)
    )


def reply_text(text: str, attached: Sequence[PendingUpdate], reply: TurnReply | None) -> str:
    """The reply, followed by every attached update the model did not word itself."""
    return with_updates(text, attached, reply.attached if reply is not None else ())


def replied_operations(outcomes: Sequence[AdmissionOutcome]) -> tuple[RepliedOperation, ...]:
    """Admission's answer per operation, as the reply records it (for a repeat's answer)."""
    return tuple(
        RepliedOperation(
            operation_id=o.operation_id, tool=o.tool, status=o.status, batch_id=o.batch_id
        )
        for o in outcomes
        if o.operation_id
    )


def answer(
    *,
    turn_id: str,
    text: str,
    response_id: str,
    operations: Sequence[RepliedOperation],
    attached_delivery_ids: Sequence[str],
    channel: Channel,
) -> dict[str, Any]:
    """The turn's answer to its caller (the first time, and rebuilt for every repeat)."""
    extra: dict[str, Any] = {}
    if channel == "voice":
        extra["attached_delivery_ids"] = list(attached_delivery_ids)
    return {
        **extra,
        "turn_id": turn_id,
        "reply": {"text": text, "response_id": response_id},
        "operations": [
            {
                "operation_id": o.operation_id,
                "tool": o.tool,
                "status": o.status,
                "batch_id": o.batch_id,
            }
            for o in operations
        ],
    }


def answer_of_reply(reply: Envelope[TurnReplied], channel: Channel) -> dict[str, Any]:
    """A repeated client turn id's answer, from the first run's `turn.replied`."""
    return answer(
        turn_id=reply.turn_id or "",
        text=reply.event.text,
        response_id=reply.response_id or "",
        operations=reply.event.operations,
        attached_delivery_ids=reply.event.attached_delivery_ids,
        channel=channel,
    )


# How a turn begins against its session's log (`opening`).
Opening = Literal["open", "wait", "wait_repeat", "answered"]


def opening(
    *,
    repeat_of: str | None,
    replied: bool,
    open_turn: tuple[str, datetime] | None,
    now: datetime,
    expiry: timedelta,
) -> Opening:
    """Whether a turn opens now, waits for the open one, or is a repeat already answered.

    `repeat_of` is the latest turn of the request's client turn id in the log (None for a
    new id or none); `replied` whether that turn's reply is written. The log is current for
    the session whenever `turn.received` is then appended at its expected sequence, so an id
    seen nowhere in it was never received. A repeat whose first run is still open waits for
    it (`wait_repeat`); one whose first run died unreplied (its turn expired) opens again,
    and intent keys keep the second run from admitting anything twice.
    """
    if repeat_of is not None and replied:
        return "answered"
    if open_turn is not None and now - open_turn[1] < expiry:
        return "wait_repeat" if open_turn[0] == repeat_of else "wait"
    return "open"
