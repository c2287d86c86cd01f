"""Batch events: the operations admitted in one turn, closed together."""

from __future__ import annotations

from typing import Any, Literal

from .base import EventPart, StreamEvent
from .operations import Priority

MemberStatus = Literal["committed", "failed_final", "cancelled", "rejected"]


class _Event(StreamEvent, frozen=True, kw_only=True):
    pass


class BatchOpened(_Event, frozen=True, kw_only=True, tag="batch.opened"):
    """A turn admitted a set of operations that close with one message."""

    operation_ids: tuple[str, ...]
    # Each member's tool, in the same order: what a closing names if a member never got
    # its admission (its turn died in between). Empty on batches opened before it existed.
    tools: tuple[str, ...] = ()
    # Each member's arguments and priority, in the same order: with the tool, everything a
    # closing words a member with, so the coordinator is not delivered the admissions.
    # Empty on batches opened before they existed (the closing loads such a member).
    arguments: tuple[dict[str, Any], ...] = ()
    priorities: tuple[Priority, ...] = ()


class BatchMemberSettled(_Event, frozen=True, kw_only=True, tag="batch.member_settled"):
    """One member of the batch reached a terminal state (batches closed before `settled`)."""

    member_operation_id: str
    status: MemberStatus


class SettledMember(EventPart, frozen=True, kw_only=True):
    """One member of a closed batch and the first terminal status it reached."""

    operation_id: str
    status: MemberStatus


class BatchDrained(_Event, frozen=True, kw_only=True, tag="batch.drained"):
    """Every member is terminal; the batch's one final delivery was created."""

    final_delivery_id: str
    committed: int
    failed: int
    # Every member, in the order they reached their terminal state. Empty on batches
    # closed before it existed, whose log has one `batch.member_settled` per member.
    settled: tuple[SettledMember, ...] = ()


BatchEvent = BatchOpened | BatchMemberSettled | BatchDrained
