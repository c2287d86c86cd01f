"""Delivery routing, as pure functions: which channel a delivery goes to, or who finishes it.

`route(state, channels)` takes the delivery as the view holds it and what the session has
(a call on this process, a call held by another live surface, an external agent, and how a
`sent` delivery went out) and names the one step the executor in `deliveries.py` takes.
Chat is always there; every other route needs its channel in `channels`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    DeliveryAttached,
    DeliveryDecided,
    DeliveryEvent,
    DeliverySent,
    TurnReceived,
)

from ..projections import Entry

# The delivery kinds the executor's consumer asks the broker for: the only ones after which
# `route` can name a step (a say-now decision hands a delivery over; `sent` and `attached`
# put it in flight). Every other kind leaves a delivery pending without a decision, settled,
# or where it was, so the executor would find nothing to do; per chat closing that spares
# `delivery.ready` and the executor's own `delivery.delivered`, two deliveries and two acks.
ACTED_ON: tuple[type[DeliveryEvent], ...] = (DeliveryDecided, DeliverySent, DeliveryAttached)


class Route(StrEnum):
    """The executor's next step for one delivery."""

    SPEAK = "speak"  # say it on the call this process holds
    LEAVE_TO_OWNER = "leave_to_owner"  # another surface holds the call: its watcher says it
    AGENT = "agent"  # push it to the external agent
    CHAT = "chat"  # send it on chat
    SETTLE_VOICE = "settle_voice"  # sent on a call nobody here holds: unheard once it is gone
    SETTLE_AGENT = "settle_agent"  # sent to an agent connection: the agent channel settles it
    FINISH_CHAT = "finish_chat"  # sent on chat: write the message if missing, mark delivered
    NOTHING = "nothing"  # not handed over and not in flight


@dataclass(frozen=True, slots=True)
class Channels:
    """What the session has to be reached by, as far as one delivery is concerned."""

    local_call: bool = False
    # A call of the session held by a live surface (this one or not); only looked up when a
    # handed-over delivery has no call here.
    live_call: bool = False
    agent: bool = False
    sent_on_voice: bool = False
    sent_on_agent: bool = False


def route(state: DeliveryState, channels: Channels) -> Route:
    """The one step to take for the delivery now."""
    if state.handed_off:
        if channels.local_call:
            return Route.SPEAK
        if channels.live_call:
            return Route.LEAVE_TO_OWNER
        if channels.agent:
            # An external agent is the channel: pushed to it, or back to pending.
            return Route.AGENT
        return Route.CHAT
    if state.status is DeliveryStatus.SENT:
        if channels.sent_on_voice:
            return Route.SETTLE_VOICE
        if channels.sent_on_agent:
            return Route.SETTLE_AGENT
        return Route.FINISH_CHAT
    return Route.NOTHING


def needs_liveness(state: DeliveryState, *, local_call: bool) -> bool:
    """Whether the route depends on a call held elsewhere (a lookup in the ownership KV)."""
    return state.handed_off and not local_call


def sent_event(state: DeliveryState, channel: Literal["chat", "voice"]) -> DeliverySent:
    """How a handed-over delivery is marked sent on its channel."""
    mode: Literal["interrupt", "proactive"] = (
        "interrupt" if state.decision == "interrupt" else "proactive"
    )
    return DeliverySent(mode=mode, channel=channel)


def sent_on_voice(entries: Sequence[Entry], delivery_id: str) -> bool:
    """Sent on a call, or attached to the reply of a spoken turn: the call settles it."""
    channel: str | None = None
    for entry in entries:
        event = entry.envelope.event
        if entry.envelope.delivery_id != delivery_id:
            continue
        if isinstance(event, DeliverySent):
            channel = event.channel
        elif isinstance(event, DeliveryAttached):
            channel = _turn_channel(entries, event.attached_to_turn_id)
    return channel == "voice"


def _turn_channel(entries: Sequence[Entry], turn_id: str) -> str | None:
    for entry in entries:
        event = entry.envelope.event
        if isinstance(event, TurnReceived) and entry.envelope.turn_id == turn_id:
            return event.channel
    return None


def lost_reason(dead_calls: Sequence[str]) -> str:
    """Why a delivery sent to a call nobody holds went unheard."""
    return "call_lost" if dead_calls else "call_ended"
