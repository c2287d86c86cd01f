"""Delivery events: when and how a result reaches the user, and whether it was heard."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

import msgspec

from .base import StreamEvent

DeliveryKind = Literal["final", "progress"]
DeliveryMode = Literal["proactive", "next_turn", "interrupt"]
Decision = Literal[
    "deliver_now",
    "interrupt",
    "wait_for_quiet",
    "after_playback",
    "attach_next_turn",
    "suppress",
    "supersede",
]


class _Event(StreamEvent, frozen=True, kw_only=True):
    pass


class DeliveryReady(_Event, frozen=True, kw_only=True, tag="delivery.ready"):
    """A message for the user exists and awaits the relevance gate and the ActivityGate."""

    kind: DeliveryKind
    priority: Literal["normal", "urgent"] = "normal"
    text: str
    short_text: str
    source_operation_ids: tuple[str, ...]


class DeliveryDecided(_Event, frozen=True, kw_only=True, tag="delivery.decided"):
    """The policy's decision about a delivery and the reason for it."""

    decision: Decision
    reason: str
    mode: DeliveryMode | None = None
    # When the policy looks again even if nothing changes (quiet window end, wait limit).
    recheck_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None
    # The delivery fell back to next-turn resync and waits for the next reply only.
    resync: bool = False


class DeliverySent(_Event, frozen=True, kw_only=True, tag="delivery.sent"):
    """The interaction surface wrote the delivery to the channel."""

    mode: DeliveryMode
    # `mcp`: the closing is the result of the batch's MCP task (handed out by `tasks/get`).
    channel: Literal["chat", "voice", "agent", "mcp"]
    # The agent channel's connection it was pushed on (Agent API), so its loss settles it.
    connection_id: str | None = None


class DeliveryDelivered(_Event, frozen=True, kw_only=True, tag="delivery.delivered"):
    """Chat: the message is in history and was pushed; MCP: a `tasks/get` handed it out."""


class DeliverySpoken(_Event, frozen=True, kw_only=True, tag="delivery.spoken"):
    """Voice: playback of the delivery was confirmed with no clear pending."""


class DeliveryUnheard(_Event, frozen=True, kw_only=True, tag="delivery.unheard"):
    """Voice: the delivery's audio was flushed or cut; it goes back to pending, shorter."""

    played_ms: int
    reason: str


class DeliverySuppressed(_Event, frozen=True, kw_only=True, tag="delivery.suppressed"):
    """The delivery will never be said; the reason is recorded."""

    reason: str


class DeliverySuperseded(_Event, frozen=True, kw_only=True, tag="delivery.superseded"):
    """A newer delivery replaced this one."""

    by_delivery_id: str
    reason: str


class DeliveryAttached(_Event, frozen=True, kw_only=True, tag="delivery.attached"):
    """The delivery rode on the reply to a later turn (next-turn resync)."""

    attached_to_turn_id: str


class DeliveryRequeued(_Event, frozen=True, kw_only=True, tag="delivery.requeued"):
    """An unheard delivery is pending again, in its shorter form, for a new decision."""

    text: str
    reason: str


class DeliveryReconciliationRequested(
    _Event, frozen=True, kw_only=True, tag="delivery.reconciliation_requested"
):
    """The result must be reconciled with a newer intent before anything confirms it."""

    operation_ids: tuple[str, ...]
    reason: str
    newer_operation_id: str | None = None
    subject_key: str | None = None


DeliveryEvent = (
    DeliveryReady
    | DeliveryDecided
    | DeliverySent
    | DeliveryDelivered
    | DeliverySpoken
    | DeliveryUnheard
    | DeliverySuppressed
    | DeliverySuperseded
    | DeliveryAttached
    | DeliveryRequeued
    | DeliveryReconciliationRequested
)
