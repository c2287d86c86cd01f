"""The relevance gate (pure): whether a delivery may still be said, and what a refusal appends.

Reasons are stable codes (`session_closed`, `stale_superseded`, ...) followed by detail
after a colon, so dashboards can group on the code and people can read the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from libs.events import (
    DeliveryDecided,
    DeliveryEvent,
    DeliveryReconciliationRequested,
    DeliverySuperseded,
    DeliverySuppressed,
)

from .batch import final_delivery_id
from .channel import ChannelState, OperationFacts
from .delivery import DeliveryState


@dataclass(frozen=True, slots=True)
class Verdict:
    """The relevance gate's refusal: what to append instead of a timing decision."""

    action: Literal["suppress", "supersede"]
    reason: str
    by_delivery_id: str | None = None
    reconcile: DeliveryReconciliationRequested | None = None
    stale: bool = False


def check_relevance(
    delivery: DeliveryState,
    channel: ChannelState | None,
    ops: Mapping[str, OperationFacts],
    session_ops: Iterable[OperationFacts],
    finals: Mapping[str, str],
) -> Verdict | None:
    """None when the delivery may still be said; otherwise why not.

    `session_ops` are the session's operations; `finals` maps batch id to its final
    delivery id for the finals that exist.
    """
    sources = [ops[o] for o in delivery.source_operation_ids if o in ops]
    if channel is not None and channel.closed:
        return Verdict("suppress", "session_closed: no turn can carry it any more")
    for op in sources:
        if op.session_id != delivery.session_id:
            return Verdict("suppress", f"wrong_session: {op.operation_id} belongs elsewhere")
        if channel is not None and channel.user_id and op.user_id and op.user_id != channel.user_id:
            return Verdict("suppress", f"wrong_user: {op.operation_id} was asked by another user")
    # Not already communicated: a progress note is moot once the batch's closing exists.
    final = finals.get(delivery.batch_id or "")
    if delivery.kind == "progress" and final is not None:
        return Verdict(
            "supersede",
            "final_ready: the batch's closing replaces its progress notes",
            by_delivery_id=final,
        )
    stale = _newer_intent(delivery, sources, session_ops)
    if stale is not None:
        old, newer = stale
        return _superseded(
            old.operation_id,
            newer,
            tuple(o.operation_id for o in sources if o.subject_key == newer.subject_key),
        )
    refused = not_allowed(sources, channel.agent if channel is not None else None)
    if refused is not None:
        return Verdict("suppress", refused)
    for op in sources:
        if op.compensated_by is not None:
            return _undone(op.operation_id, op.compensated_by)
    return None


class Owned(Protocol):
    """An operation as far as the owner rule reads it (the gate's facts, a view's state)."""

    @property
    def operation_id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def agent(self) -> str | None: ...


def not_allowed(sources: Iterable[Owned], active: str | None) -> str | None:
    """Why a closing may not be said to the active agent: a source operation is owned by
    another agent (the one that asked, before a handoff); None when every source allows it."""
    for op in sources:
        if op.owner == "agent" and op.agent and active and op.agent != active:
            return (
                f"agent_not_allowed: {op.operation_id} belongs to agent {op.agent}, "
                f"active agent is {active}"
            )
    return None


def _superseded(old: str, newer: OperationFacts, replaced: tuple[str, ...]) -> Verdict:
    reason = (
        f"stale_superseded: {newer.operation_id} is a newer intent on "
        f"{newer.subject_key} than {old}"
    )
    return Verdict(
        "supersede",
        reason,
        by_delivery_id=final_delivery_id(newer.batch_id or newer.operation_id),
        reconcile=DeliveryReconciliationRequested(
            operation_ids=replaced,
            reason=reason,
            newer_operation_id=newer.operation_id,
            subject_key=newer.subject_key,
        ),
        stale=True,
    )


def _undone(operation_id: str, compensation_id: str) -> Verdict:
    reason = f"needs_reconciliation: {operation_id} is being undone by {compensation_id}"
    return Verdict(
        "suppress",
        reason,
        reconcile=DeliveryReconciliationRequested(operation_ids=(operation_id,), reason=reason),
    )


def stale_after_turn(
    delivery: DeliveryState,
    superseded_by: Mapping[str, OperationFacts],
    undone_by: Mapping[str, str],
) -> Verdict | None:
    """The gate's answer for an update a turn's own requests have just made stale.

    A turn decides what rides on its reply only after admitting its calls, before the gate
    has seen them: `superseded_by` maps an older operation to the newer intent that replaces
    it, `undone_by` an operation to the compensation the user asked for. Same reasons as
    `check_relevance`, so the record reads the same whoever decided.
    """
    sources = delivery.source_operation_ids
    for op in sources:
        newer = superseded_by.get(op)
        if newer is not None:
            replaced = tuple(
                o for o in sources
                if o in superseded_by and superseded_by[o].operation_id == newer.operation_id
            )
            return _superseded(op, newer, replaced)
    for op in sources:
        if op in undone_by:
            return _undone(op, undone_by[op])
    return None


def refusal_events(delivery: DeliveryState, verdict: Verdict) -> list[DeliveryEvent]:
    """What a relevance refusal appends: the reconciliation record once, then the decision."""
    events: list[DeliveryEvent] = []
    if verdict.reconcile is not None and delivery.reconciliation is None:
        events.append(verdict.reconcile)
    if verdict.action == "supersede":
        events.append(DeliveryDecided(decision="supersede", reason=verdict.reason))
        by = verdict.by_delivery_id or ""
        events.append(DeliverySuperseded(by_delivery_id=by, reason=verdict.reason))
    else:
        events.append(DeliveryDecided(decision="suppress", reason=verdict.reason))
        events.append(DeliverySuppressed(reason=verdict.reason))
    return events


def _newer_intent(
    delivery: DeliveryState,
    sources: list[OperationFacts],
    session_ops: Iterable[OperationFacts],
) -> tuple[OperationFacts, OperationFacts] | None:
    keyed = [o for o in sources if o.subject_key and o.admitted_seq]
    if not keyed:
        return None
    own = set(delivery.source_operation_ids)
    newest: tuple[OperationFacts, OperationFacts] | None = None
    for other in session_ops:
        if other.operation_id in own or not other.admitted_seq:
            continue
        for op in keyed:
            if other.subject_key == op.subject_key and other.admitted_seq > op.admitted_seq and (
                newest is None or other.admitted_seq > newest[1].admitted_seq
            ):
                newest = (op, other)
    return newest
