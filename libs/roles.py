"""A service's roles on the bus, declared once as data: what it consumes and what it appends.

Each service lists them in `services/<name>/consumers.py` (`CONSUMERS`, `PUBLICATIONS`).
Three readers take the same tuples, so none can drift from the others: the runtime builds
its durable consumers from them (`libs/consumers.py`, handlers bound by role at the
composition root), `devtools.proto` writes the AsyncAPI document's operations from them, and
`devtools.consumer_table` writes the table of durable consumers in docs/architecture.md.
Pure data: importing a declaration starts nothing and reaches no broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

import msgspec

from libs.bus import EVENT_CODECS, Context, Topology
from libs.bus.topology import Partition
from libs.events import WORK, EventCodec

EventType = type[msgspec.Struct]

# The codec of every stream a service can consume: a context has exactly one.
CODECS: Final[Mapping[Context, EventCodec[Any]]] = {**EVENT_CODECS, Context.WORK: WORK}


def per_aggregate(subject: str) -> str:
    """A kind-addressed event's subject without its kind token: one group per aggregate."""
    return subject.rpartition(".")[0]


def _whole_subject(subject: str) -> str:
    return subject


class Grouping(StrEnum):
    """Which of a consumer's messages are handled one at a time, in stream order (the rest
    run concurrently, up to the consumer's `max_in_flight`)."""

    # One session's messages (the consumer's default).
    SESSION = "session"
    # One aggregate's events: the subject without its kind token (e.g. one operation's
    # `admitted` and `cancel_requested`, in stream order), many aggregates at once.
    AGGREGATE = "aggregate"
    # One subject's messages (e.g. one operation's work commands).
    SUBJECT = "subject"

    def group_by(self) -> Callable[[str], str] | None:
        """The consumer's `group_by` (None: its default, by session)."""
        if self is Grouping.AGGREGATE:
            return per_aggregate
        if self is Grouping.SUBJECT:
            return _whole_subject
        return None


@dataclass(frozen=True, slots=True)
class ConsumerDeclaration:
    """One durable consumer of a service: its stream, the kinds it asks the broker for and
    how its messages are grouped. Its handler is bound by `role` at the composition root."""

    service: str
    # The durable's name is `<service>-<role>[-p<k>]`: a role is renamed only with a
    # migration, since a new name is a new durable that replays the stream.
    role: str
    context: Context
    # What it is for, in the AsyncAPI document and the docs' table.
    summary: str
    # The event kinds the broker delivers (`Topology.kinds_filter`); empty: the whole stream.
    kinds: tuple[EventType, ...] = ()
    grouping: Grouping = Grouping.SESSION
    # One durable per partition of sessions, each handling only its own (docs: Partitions).
    partitioned: bool = False

    def __post_init__(self) -> None:
        if self.context not in CODECS:
            raise ValueError(f"{self.context.value} is not consumed through a durable")
        # Refuses a context not addressed by kind, before any process starts.
        if self.kinds:
            Topology().kinds_filter(self.context, self.kinds)

    @property
    def codec(self) -> EventCodec[Any]:
        """The decoder of the consumed stream."""
        return CODECS[self.context]

    def durable(self, topology: Topology, partition: Partition | None = None) -> str:
        """The durable's name (per partition when the declaration is partitioned)."""
        return topology.durable(self.service, self.role, partition if self.partitioned else None)

    def filter_subjects(self, topology: Topology) -> tuple[str, ...] | None:
        """What the broker delivers; None for the whole stream."""
        return topology.kinds_filter(self.context, self.kinds) if self.kinds else None


@dataclass(frozen=True, slots=True)
class Publication:
    """One stream a service appends to, optionally only some of its kinds (for the AsyncAPI
    document; the runtime checks the streams' readiness from the contexts)."""

    service: str
    context: Context
    summary: str
    only: tuple[EventType, ...] = ()
    exclude: tuple[EventType, ...] = ()


def published_contexts(publications: tuple[Publication, ...]) -> tuple[Context, ...]:
    """The streams a runtime declares and watches for readiness, in declaration order."""
    return tuple(dict.fromkeys(p.context for p in publications))
