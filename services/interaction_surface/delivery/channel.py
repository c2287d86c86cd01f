"""What the delivery executor asks of a channel: the plug-in contract chat, calls and external
agents each implement (`chat/channel.py`, `voice/channel.py`, `agent/channel.py`).

A channel answers two questions about one delivery, both from the live view and what this
process holds, and does the one step the routing (`routing.py`) gives it:

- handed over to be said now: can it reach the session (`reach`: it takes it, another live
  surface holds its connection, or the session is not on it), then `hand_over`;
- left `sent`: is that send its own (`holds_sent`), then `settle` it (what its acks, marks
  or own finishing say, or back to pending once its connection is gone everywhere).

The sweep (start-up, then every ownership TTL) re-executes the deliveries a channel says
may be stranded on a connection that can die (`strandable`), then lets each channel record
its own dead connections (`sweep`). `busy` names a delivery this process is saying on the
channel right now (a call playing it): nobody executes it meanwhile.
"""

from __future__ import annotations

from typing import Literal, Protocol

from libs.domain import DeliveryState
from libs.events import DeliverySent

from .routing import Reach


class LookAgain(Exception):
    """A channel's report no longer holds (the call hung up since): route the delivery again."""


class Channel(Protocol):
    """One way of reaching a session, as the delivery executor uses it."""

    def busy(self, delivery_id: str) -> bool:
        """Whether this process is saying the delivery on this channel right now."""
        ...

    async def reach(self, state: DeliveryState) -> Reach:
        """For a delivery handed over to be said now: can this channel say it."""
        ...

    async def hand_over(self, state: DeliveryState) -> None:
        """Say it (after `reach` answered `TAKES`): `delivery.sent`, then the channel's way."""
        ...

    def holds_sent(self, state: DeliveryState) -> bool:
        """For a delivery left `sent`: whether this channel settles it."""
        ...

    async def settle(self, state: DeliveryState) -> None:
        """Finish or give back what this channel left `sent` (after `holds_sent`)."""
        ...

    def strandable(self, state: DeliveryState) -> bool:
        """Left `sent` on a connection of this channel that can die: the sweep looks at it."""
        ...

    async def sweep(self) -> None:
        """After the sweep's deliveries: record the end of this channel's dead connections."""
        ...


class Watched(Protocol):
    """A connection whose session's handed-over deliveries the executor says while it is open
    (a call, an agent's WebSocket), whichever surface consumed them."""

    @property
    def session_id(self) -> str:
        """The session the connection carries."""
        ...

    @property
    def closed(self) -> bool:
        """Whether the connection has ended."""
        ...


def sent_event(state: DeliveryState, channel: Literal["chat", "voice"]) -> DeliverySent:
    """How a handed-over delivery is marked sent on its channel."""
    mode: Literal["interrupt", "proactive"] = (
        "interrupt" if state.decision == "interrupt" else "proactive"
    )
    return DeliverySent(mode=mode, channel=channel)
