"""Batch projection and decider: one final delivery per batch, whatever arrives twice."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Literal

from libs.events import BatchDrained, BatchEvent, BatchMemberSettled, BatchOpened, Envelope

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
    """Members of a batch, which of them settled, and its closing delivery if created."""

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

    @property
    def drained(self) -> bool:
        """Every member reached a terminal state."""
        return bool(self.members) and all(m in self.settled for m in self.members)

    @property
    def closed(self) -> bool:
        """The batch's closing delivery exists (batch.drained was appended)."""
        return self.final_delivery_id is not None

    @property
    def closing_due(self) -> bool:
        """Drained but not yet closed: the coordinator still owes the final delivery."""
        return self.drained and not self.closed


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
            return evolved(state, version=v, members=ops, tools=tools)
        case BatchMemberSettled(member_operation_id=op, status=status):
            if op not in state.members:
                raise BatchError(f"batch {batch_id}: {op} is not a member")
            if op in state.settled:
                # A second terminal event for the same member changes nothing.
                return evolved(state, version=v)
            settled = dict(state.settled)
            settled[op] = status
            return evolved(state, version=v, settled=MappingProxyType(settled))
        case BatchDrained(final_delivery_id=delivery_id):
            if state.final_delivery_id not in (None, delivery_id):
                raise BatchError(f"batch {batch_id} already closed by {state.final_delivery_id}")
            return evolved(state, version=v, final_delivery_id=delivery_id)
    raise BatchError(f"unhandled batch event {type(event).__name__}")


def decide_settle(
    state: BatchState, operation_id: str, status: MemberStatus, final_delivery_id: str
) -> list[BatchEvent]:
    """Events to append when a member reaches a terminal state (none if already known)."""
    if operation_id not in state.members or operation_id in state.settled:
        return []
    events: list[BatchEvent] = [BatchMemberSettled(member_operation_id=operation_id, status=status)]
    settled = {**state.settled, operation_id: status}
    if state.final_delivery_id is None and all(m in settled for m in state.members):
        events.append(_drained(settled, final_delivery_id))
    return events


@dataclass(frozen=True, slots=True)
class MemberTerminal:
    """Input: an operation of the batch reached a terminal state."""

    operation_id: str
    status: MemberStatus


@dataclass(frozen=True, slots=True)
class CloseBatch:
    """Input: the closing delivery exists; record that the batch is closed."""

    final_delivery_id: str


BatchInput = MemberTerminal | CloseBatch


def decide(state: BatchState, command: BatchInput) -> list[BatchEvent]:
    """The coordinator's decider, one step at a time.

    Settling and closing are separate steps so that `batch.drained` is only appended after
    `delivery.ready` exists: a batch that is drained but not closed tells a restarted
    coordinator exactly which step is left.
    """
    match command:
        case MemberTerminal(operation_id=op, status=status):
            if op not in state.members or op in state.settled:
                return []
            return [BatchMemberSettled(member_operation_id=op, status=status)]
        case CloseBatch(final_delivery_id=delivery_id):
            if not state.closing_due:
                return []
            return [_drained(dict(state.settled), delivery_id)]


def _drained(settled: dict[str, MemberStatus], delivery_id: str) -> BatchDrained:
    committed = sum(1 for s in settled.values() if s == "committed")
    return BatchDrained(
        final_delivery_id=delivery_id, committed=committed, failed=len(settled) - committed
    )
