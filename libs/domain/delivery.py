"""Delivery projection: the lifecycle of one message to the user, per the §6
statuses of docs/contract.md."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import TypeVar

from libs.events import (
    DeliveryAttached,
    DeliveryDecided,
    DeliveryDelivered,
    DeliveryEvent,
    DeliveryReady,
    DeliveryReconciliationRequested,
    DeliveryRequeued,
    DeliverySent,
    DeliverySpoken,
    DeliverySuperseded,
    DeliverySuppressed,
    DeliveryUnheard,
    Envelope,
)

from .evolving import evolved

B = TypeVar("B")


class DeliveryStatus(StrEnum):
    """Delivery statuses as the API shows them."""

    PENDING = "pending"
    WAITING = "waiting"
    SENT = "sent"
    DELIVERED = "delivered"
    SPOKEN = "spoken"
    UNHEARD = "unheard"
    SUPPRESSED = "suppressed"
    SUPERSEDED = "superseded"


D = DeliveryStatus
# Statuses from which the delivery may still reach the user.
OPEN: frozenset[DeliveryStatus] = frozenset({D.PENDING, D.WAITING, D.UNHEARD})
CLOSED: frozenset[DeliveryStatus] = frozenset({D.DELIVERED, D.SPOKEN, D.SUPPRESSED, D.SUPERSEDED})
WAITING_DECISIONS = frozenset({"wait_for_quiet", "after_playback", "attach_next_turn"})
# Decisions that hand the delivery to the interaction surface to say it now.
SAY_NOW_DECISIONS = frozenset({"deliver_now", "interrupt"})
_WAITING_DECISIONS = WAITING_DECISIONS
# Unheard because nothing ever started playing it (an agent channel that was gone): not an
# attempt that was cut, so it does not use up the retries before next-turn resync.
UNCOUNTED_UNHEARD = frozenset({"not_started"})


class IllegalDeliveryTransition(Exception):
    """An event that the delivery's current status does not allow."""


@dataclass(frozen=True, slots=True)
class DeliveryState:
    """What is known about one delivery."""

    delivery_id: str
    session_id: str
    batch_id: str | None
    status: DeliveryStatus
    kind: str
    priority: str
    text: str
    short_text: str
    mode: str | None = None
    reason: str | None = None
    attempts: int = 0
    version: int = 0
    source_operation_ids: tuple[str, ...] = ()
    turn_id: str | None = None
    agent: str | None = None
    ready_at: datetime | None = None
    # The policy's latest decision, and when it said it would look again.
    decision: str | None = None
    recheck_at: datetime | None = None
    resync: bool = False
    unheard: int = 0
    reconciliation: str | None = None

    @property
    def open(self) -> bool:
        """The delivery may still reach the user."""
        return self.status in OPEN

    @property
    def handed_off(self) -> bool:
        """Decided to be said now; the interaction surface owns the next step."""
        return self.status is D.PENDING and self.decision in SAY_NOW_DECISIONS


def envelope_for(
    state: DeliveryState,
    event: B,
    *,
    event_id: str,
    now: datetime,
    agent: str | None = None,
    carries: bool = True,
    causation_id: str | None = None,
) -> Envelope[B]:
    """An event about a delivery (its own, or a message or playback of it), with its ids.

    `agent` overrides the admitting agent (a message goes out under the active one);
    `carries=False` leaves the delivery id out, for a message that is not the closing itself.
    """
    return Envelope(
        event_id=event_id,
        occurred_at=now,
        session_id=state.session_id,
        turn_id=state.turn_id,
        batch_id=state.batch_id,
        delivery_id=state.delivery_id if carries else None,
        agent=agent if agent is not None else state.agent,
        causation_id=causation_id,
        event=event,
    )


def evolve(state: DeliveryState | None, env: Envelope[DeliveryEvent]) -> DeliveryState:
    """Apply one delivery event, refusing transitions that would lie about what was heard."""
    event = env.event
    if state is None:
        if not isinstance(event, DeliveryReady):
            raise IllegalDeliveryTransition(f"{type(event).__name__} before delivery.ready")
        return DeliveryState(
            delivery_id=env.delivery_id or "",
            session_id=env.session_id,
            batch_id=env.batch_id,
            status=D.PENDING,
            kind=event.kind,
            priority=event.priority,
            text=event.text,
            short_text=event.short_text,
            version=1,
            source_operation_ids=event.source_operation_ids,
            turn_id=env.turn_id,
            agent=env.agent,
            ready_at=env.occurred_at,
        )
    status = state.status
    bumped = evolved(state, version=state.version + 1)
    match event:
        case DeliveryReady():
            raise IllegalDeliveryTransition(f"delivery {state.delivery_id} is already ready")
        case DeliveryDecided() if status in OPEN:
            if event.decision in WAITING_DECISIONS:
                new_status = D.WAITING
            elif event.decision in SAY_NOW_DECISIONS:
                new_status = D.PENDING
            else:
                new_status = status
            return evolved(
                bumped,
                status=new_status,
                reason=event.reason,
                mode=event.mode or state.mode,
                decision=event.decision,
                recheck_at=event.recheck_at,
                resync=event.resync,
            )
        case DeliverySent(mode=mode) if status in OPEN:
            return evolved(bumped, status=D.SENT, mode=mode, attempts=state.attempts + 1)
        case DeliveryAttached() if status in OPEN:
            return evolved(bumped, status=D.SENT, mode="next_turn", attempts=state.attempts + 1)
        case DeliveryDelivered() if status is D.SENT:
            return evolved(bumped, status=D.DELIVERED)
        case DeliverySpoken() if status is D.SENT:
            return evolved(bumped, status=D.SPOKEN)
        case DeliveryUnheard(reason=reason) if status is D.SENT:
            counted = 0 if reason.partition(":")[0] in UNCOUNTED_UNHEARD else 1
            return evolved(
                bumped, status=D.UNHEARD, reason=reason, unheard=state.unheard + counted
            )
        case DeliveryRequeued(text=text, reason=reason) if status is D.UNHEARD:
            return evolved(
                bumped,
                status=D.PENDING,
                text=text,
                reason=reason,
                decision=None,
                recheck_at=None,
                resync=False,
            )
        case DeliveryReconciliationRequested(reason=reason):
            # A record for whoever reconciles; it does not move the delivery by itself.
            return evolved(bumped, reconciliation=reason)
        case DeliverySuppressed(reason=reason) if status in OPEN:
            return evolved(bumped, status=D.SUPPRESSED, reason=reason)
        case DeliverySuperseded(reason=reason) if status in OPEN:
            return evolved(bumped, status=D.SUPERSEDED, reason=reason)
        case _:
            pass
    raise IllegalDeliveryTransition(
        f"delivery {state.delivery_id}: {type(event).__name__} is illegal in {status.value}"
    )
