"""A call's control events (barge-in, backchannel, a cancelled reply) through the one write path.

They live on the session's control subject (`hl.control.<session>.control`), off the
ordinary interaction path, and nothing folds them here: each is a fact stored once under
its event id (`Repository.record`), never a decision guarded by a sequence.
"""

from __future__ import annotations

from typing import Any

from libs.bus import Aggregate, Context, Repository, Topology
from libs.clock import Clock, Ids
from libs.events import CONTROL, ControlEvent, Envelope


def _unfolded(_state: None, _envelope: Envelope[ControlEvent]) -> None:
    """Control events keep no state of their own (the delivery policy reacts to them)."""


def control_aggregate(topology: Topology) -> Aggregate[None, ControlEvent]:
    """The control stream's events, as the one write path knows them."""
    return Aggregate(
        label="control", stream=topology.stream_name(Context.CONTROL), codec=CONTROL,
        evolve=_unfolded,
    )


class ControlLog:
    """Stamps a session's control event and records it on the session's control subject."""

    def __init__(
        self,
        repository: Repository[None, ControlEvent],
        topology: Topology,
        *,
        clock: Clock,
        ids: Ids,
    ) -> None:
        self._repository = repository
        self._topology = topology
        self._clock = clock
        self._ids = ids

    async def append(self, session_id: str, event: ControlEvent, **refs: Any) -> None:
        """Record `event` for the session (`refs`: the envelope's ids, e.g. `playback_id`)."""
        envelope: Envelope[ControlEvent] = Envelope(
            event_id=self._ids.new("ev"), occurred_at=self._clock.now(), session_id=session_id,
            event=event, **refs,
        )
        await self._repository.record(self._topology.control_subject(session_id), envelope)
