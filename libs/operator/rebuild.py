"""Rebuilding a projection from scratch by replay, read-only, with a summary by status."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from nats.js import JetStreamContext

from libs.bus import Context, Topology, replay
from libs.domain import Projection, batch, delivery, operation, session
from libs.events import BATCHES, DELIVERIES, INTERACTION, OPERATIONS, Envelope, EventCodec

ProjectionName = Literal["operations", "batches", "deliveries", "sessions"]
PROJECTIONS: tuple[ProjectionName, ...] = ("operations", "batches", "deliveries", "sessions")


@dataclass(slots=True)
class Rebuilt:
    """What a rebuild read and what it produced."""

    projection: str
    events: int = 0
    undecodable: int = 0
    refused: int = 0
    by_status: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """How many aggregates the rebuild produced."""
        return sum(self.by_status.values())

    def as_dict(self) -> dict[str, Any]:
        """The JSON shape of `holdline rebuild --json`."""
        return {
            "projection": self.projection,
            "events": self.events,
            "undecodable": self.undecodable,
            "refused": self.refused,
            "total": self.total,
            "by_status": dict(sorted(self.by_status.items())),
        }


@dataclass(frozen=True, slots=True)
class _Source:
    context: Context
    codec: EventCodec[Any]
    evolve: Callable[[Any, Envelope[Any]], Any]
    key: Callable[[Envelope[Any]], str]
    status: Callable[[Any], str]


_SOURCES: dict[str, _Source] = {
    "operations": _Source(
        Context.OPERATIONS,
        OPERATIONS,
        operation.evolve,
        lambda e: f"{e.session_id}/{e.operation_id}",
        lambda s: str(s.status.value),
    ),
    "batches": _Source(
        Context.BATCHES,
        BATCHES,
        batch.evolve,
        lambda e: f"{e.session_id}/{e.batch_id}",
        lambda s: "closed" if s.closed else "drained" if s.drained else "open",
    ),
    "deliveries": _Source(
        Context.DELIVERIES,
        DELIVERIES,
        delivery.evolve,
        lambda e: f"{e.session_id}/{e.delivery_id}",
        lambda s: str(s.status.value),
    ),
    "sessions": _Source(
        Context.INTERACTION,
        INTERACTION,
        session.evolve,
        lambda e: e.session_id,
        lambda s: "closed" if s.closed else "open",
    ),
}


async def rebuild(
    js: JetStreamContext, topology: Topology, name: ProjectionName, session_id: str | None
) -> Rebuilt:
    """Replay the projection's stream into fresh state and count the result by status."""
    source = _SOURCES[name]
    flt = (
        topology.session_filter(source.context, session_id)
        if session_id
        else topology.context_filter(source.context)
    )
    replayed = await replay(js, topology.stream_name(source.context), flt, source.codec)
    projection: Projection[Any, Any] = Projection(source.evolve, source.key)
    for item in replayed.items:
        projection.apply(item.envelope, item.stream_seq)
    out = Rebuilt(
        projection=name,
        events=len(replayed.items),
        undecodable=len(replayed.rejected),
        refused=len(projection.refused),
    )
    out.by_status.update(source.status(s) for s in projection.states.values())
    return out
