"""Batch projection and decider: one final delivery per batch, whatever arrives twice."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Literal

from libs.events import (
    BatchDrained,
    BatchEvent,
    BatchMemberSettled,
    BatchOpened,
    Envelope,
    OperationCancelled,
    OperationCommitted,
    OperationEvent,
    OperationFailedFinal,
    OperationRejected,
    SettledMember,
)

from .evolving import evolved

MemberStatus = Literal["committed", "failed_final", "cancelled", "rejected"]


def final_delivery_key(batch_id: str) -> str:
    """The create-once key of a batch's closing delivery."""
    return f"batch:{batch_id}:final"


def claim_key(key: str) -> str:
    """A delivery key as a KV key: KV keys allow `.` but not `:`."""
    return key.replace(":", ".")


def final_delivery_id(batch_id: str) -> str:
    """The closing delivery's id, derived from the batch id alone.

    Deterministic so a coordinator that crashed between claiming the key and appending
    `delivery.ready` re-appends the very same delivery (same subject, same message id).
    """
    digest = hashlib.sha256(final_delivery_key(batch_id).encode()).hexdigest()[:24]
    return f"dlv-{digest}"


@dataclass(frozen=True, slots=True)
class BatchState:
    """Members of a batch, its closing delivery if created, and how its members settled
    (recorded by `batch.drained`; per member on batches of earlier versions)."""

    batch_id: str
    session_id: str
    members: tuple[str, ...] = ()
    settled: MappingProxyType[str, MemberStatus] = field(
        default_factory=lambda: MappingProxyType({})
    )
    final_delivery_id: str | None = None
    version: int = 0
    turn_id: str | None = None
    agent: str | None = None
    opened_at: datetime | None = None
    # Each member's tool, as `batch.opened` named it (empty on older batches).
    tools: tuple[str, ...] = ()
    # Each member's arguments and priority, as `batch.opened` named them (empty on batches
    # opened before they existed): with the tool, what a closing words a member with.
    arguments: tuple[Mapping[str, Any], ...] = ()
    priorities: tuple[str, ...] = ()

    @property
    def drained(self) -> bool:
        """The batch's log records every member's terminal state (it closed, or, on a
        batch of an earlier version, every `batch.member_settled` is written)."""
        return bool(self.members) and all(m in self.settled for m in self.members)

    @property
    def closed(self) -> bool:
        """The batch's closing delivery exists (batch.drained was appended)."""
        return self.final_delivery_id is not None


class BatchError(Exception):
    """An event that contradicts the batch's history."""


def evolve(state: BatchState | None, env: Envelope[BatchEvent]) -> BatchState:
    """Apply one batch event."""
    event = env.event
    batch_id = env.batch_id or (state.batch_id if state else "")
    if state is None:
        if not isinstance(event, BatchOpened):
            raise BatchError(f"batch {batch_id}: {type(event).__name__} before batch.opened")
        state = BatchState(
            batch_id=batch_id,
            session_id=env.session_id,
            turn_id=env.turn_id,
            agent=env.agent,
            opened_at=env.occurred_at,
        )
    # The version bump travels in the one copy each event makes.
    v = state.version + 1
    match event:
        case BatchOpened(operation_ids=ops, tools=tools):
            if state.members and state.members != ops:
                raise BatchError(f"batch {batch_id} reopened with other members")
            return evolved(
                state, version=v, members=ops, tools=tools, arguments=event.arguments,
                priorities=event.priorities,
            )
        case BatchMemberSettled(member_operation_id=op, status=status):
            if op not in state.members:
                raise BatchError(f"batch {batch_id}: {op} is not a member")
            if op in state.settled:
                # A second terminal event for the same member changes nothing.
                return evolved(state, version=v)
            settled = dict(state.settled)
            settled[op] = status
            return evolved(state, version=v, settled=MappingProxyType(settled))
        case BatchDrained(final_delivery_id=delivery_id, settled=members):
            if state.final_delivery_id not in (None, delivery_id):
                raise BatchError(f"batch {batch_id} already closed by {state.final_delivery_id}")
            if not members:
                return evolved(state, version=v, final_delivery_id=delivery_id)
            merged = {**state.settled, **{m.operation_id: m.status for m in members}}
            return evolved(
                state, version=v, final_delivery_id=delivery_id, settled=MappingProxyType(merged)
            )
    raise BatchError(f"unhandled batch event {type(event).__name__}")


def member_status(event: OperationEvent) -> MemberStatus | None:
    """The terminal status an operation event settles a batch member with, if any."""
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


def settlement(
    state: BatchState, terminal: Mapping[str, MemberStatus], order: Mapping[str, int]
) -> dict[str, MemberStatus] | None:
    """Every member's terminal status, in the order reached, once all have one; else None.

    `terminal` is each operation's first terminal status and `order` where it was seen (the
    operations stream's sequence), both from the operations stream: the batch's own log
    records its members' statuses only when it closes. A member settled in that log (a
    batch of an earlier version) keeps the status it recorded. None once closed.
    """
    if state.closed:
        return None
    shown = as_settled_so_far(state, terminal)
    if not shown.drained:
        return None
    return dict(sorted(shown.settled.items(), key=lambda item: order.get(item[0], 0)))


def as_settled_so_far(state: BatchState, terminal: Mapping[str, MemberStatus]) -> BatchState:
    """The batch as a reader shows it before its closing: the members already terminal in
    the operations stream settled (its own log records them only when it closes)."""
    if state.closed:
        return state
    settled = {
        m: status
        for m in state.members
        if (status := state.settled.get(m) or terminal.get(m)) is not None
    }
    if len(settled) == len(state.settled):
        return state
    return evolved(state, settled=MappingProxyType(settled))


@dataclass(frozen=True, slots=True)
class CloseBatch:
    """Input: the closing delivery exists; record that the batch is closed, and how each
    member settled."""

    final_delivery_id: str
    settled: Mapping[str, MemberStatus]


def decide(state: BatchState, command: CloseBatch) -> list[BatchEvent]:
    """The coordinator's decider: close the batch once its closing delivery exists.

    `batch.drained` is only appended after `delivery.ready` exists, so an open batch whose
    members are all terminal tells a restarted coordinator exactly which step is left.
    """
    if state.closed or not state.members or any(m not in command.settled for m in state.members):
        return []
    return [_drained(dict(command.settled), command.final_delivery_id)]


def _drained(settled: dict[str, MemberStatus], delivery_id: str) -> BatchDrained:
    committed = sum(1 for s in settled.values() if s == "committed")
    return BatchDrained(
        final_delivery_id=delivery_id,
        committed=committed,
        failed=len(settled) - committed,
        settled=tuple(SettledMember(operation_id=m, status=s) for m, s in settled.items()),
    )
