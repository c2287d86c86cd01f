"""A session's sync mode (seed 003): where the closing of its work stands, in one word.

`idle` nothing in flight or owed · `aggregating` a batch is still collecting results ·
`queued_final` a closing exists and is about to be said (or is being said) · `waiting` a
closing waits for a quiet moment or the end of playback · `next_turn` a closing rides on
the next reply · `proactive` the latest closing was said on its own, without a new turn.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal

from .batch import BatchState
from .delivery import DeliveryState, DeliveryStatus

SyncMode = Literal["idle", "aggregating", "queued_final", "proactive", "next_turn", "waiting"]

_SAID = frozenset({DeliveryStatus.DELIVERED, DeliveryStatus.SPOKEN})
# A closing still owed to the user: not said, not given up.
_OWED = frozenset(
    {DeliveryStatus.PENDING, DeliveryStatus.WAITING, DeliveryStatus.SENT, DeliveryStatus.UNHEARD}
)
_EPOCH = datetime.min.replace(tzinfo=UTC)


def sync_mode(
    batches: Iterable[BatchState] = (), deliveries: Iterable[DeliveryState] = ()
) -> SyncMode:
    """The session's sync mode from its batch and delivery projections (pure)."""
    finals = [d for d in deliveries if d.kind == "final"]
    owed = [d for d in finals if d.status in _OWED]
    if owed:
        latest = max(owed, key=_ready)
        if latest.status is DeliveryStatus.WAITING:
            return "next_turn" if latest.decision == "attach_next_turn" else "waiting"
        if latest.status is DeliveryStatus.SENT and latest.mode == "next_turn":
            return "next_turn"
        return "queued_final"
    if any(not b.closed for b in batches):
        return "aggregating"
    said = [d for d in finals if d.status in _SAID]
    if said:
        return "next_turn" if max(said, key=_ready).mode == "next_turn" else "proactive"
    return "idle"



def _ready(delivery: DeliveryState) -> datetime:
    return delivery.ready_at or _EPOCH
