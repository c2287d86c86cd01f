"""Delivery routing, as pure functions over what each channel reports.

The executor (`executor.py`) holds the channels in the order the composition root gave them
(a call, an external agent, chat: chat last, since it can always take a delivery). For a
delivery handed over to be said now it asks each channel whether it can reach the session
(`Reach`); for one left `sent` it asks each whether that send is its own to settle
(`Report.holds_sent`). `route(state, reports)` names the one step and the channel it belongs
to: the first channel that answers, so a channel's answer matters only when every channel
before it had nothing to say.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import DeliveryAttached, DeliveryDecided, DeliveryEvent, DeliverySent

# The delivery kinds the executor's consumer asks the broker for: the only ones after which
# `route` can name a step (a say-now decision hands a delivery over; `sent` and `attached`
# put it in flight). Every other kind leaves a delivery pending without a decision, settled,
# or where it was, so the executor would find nothing to do; per chat closing that spares
# `delivery.ready` and the executor's own `delivery.delivered`, two deliveries and two acks.
ACTED_ON: tuple[type[DeliveryEvent], ...] = (DeliveryDecided, DeliverySent, DeliveryAttached)


class Reach(StrEnum):
    """What a channel can do with a delivery handed over to be said now."""

    TAKES = "takes"  # it hands the delivery over itself, now
    HELD_ELSEWHERE = "held_elsewhere"  # another live surface holds its connection: leave it
    ABSENT = "absent"  # the session is not on this channel


@dataclass(frozen=True, slots=True)
class Report:
    """One channel's answer about one delivery (only the field `channel_question` asks is read)."""

    reach: Reach = Reach.ABSENT
    holds_sent: bool = False


class Act(StrEnum):
    """The executor's next step for one delivery."""

    HAND_OVER = "hand_over"  # the channel says it (a call speaks, an agent is pushed, chat sends)
    LEAVE_TO_OWNER = "leave_to_owner"  # the surface holding the connection says it (its watcher)
    SETTLE = "settle"  # left `sent` on the channel: it settles it (acks, marks, or finishes)
    NOTHING = "nothing"  # not handed over and not in flight, or no channel answered


@dataclass(frozen=True, slots=True)
class Step:
    """An act and the index of the channel it belongs to (None with `NOTHING`)."""

    act: Act
    channel: int | None = None


NOTHING = Step(Act.NOTHING)


def channel_question(state: DeliveryState) -> Literal["reach", "sent"] | None:
    """What the executor asks its channels about this delivery (None: nothing to ask)."""
    if state.handed_off:
        return "reach"
    if state.status is DeliveryStatus.SENT:
        return "sent"
    return None


def route(state: DeliveryState, reports: Sequence[Report]) -> Step:
    """The one step to take for the delivery now, given each channel's report, in order."""
    asked = channel_question(state)
    for index, report in enumerate(reports):
        if asked == "reach":
            if report.reach is Reach.TAKES:
                return Step(Act.HAND_OVER, index)
            if report.reach is Reach.HELD_ELSEWHERE:
                return Step(Act.LEAVE_TO_OWNER, index)
        elif asked == "sent" and report.holds_sent:
            return Step(Act.SETTLE, index)
    return NOTHING
