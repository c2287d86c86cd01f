"""Loading one aggregate: its subject's events folded into its state (`Repository.load`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from libs.events import Envelope, EventCodec

from .ports import EventStore

S = TypeVar("S")
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Loaded(Generic[S, B]):
    """An aggregate's state, its events, and the subject sequence it was decided from."""

    state: S | None
    events: list[Envelope[B]]
    last_seq: int


async def load_from(
    store: EventStore,
    stream: str,
    subject: str,
    codec: EventCodec[B],
    evolve: Callable[[S | None, Envelope[B]], S],
) -> Loaded[S, B]:
    """Fold every event on one subject of an event store into its state.

    An event the state machine refuses is skipped: it was appended by an older version or
    by a racing writer, and the history must stay readable either way.
    """
    replayed = await store.read_subject(stream, subject, codec)
    state: S | None = None
    events: list[Envelope[B]] = []
    for item in replayed.items:
        events.append(item.envelope)
        try:
            state = evolve(state, item.envelope)
        except Exception:  # noqa: BLE001, S112 - a refused event stays in history, not in state
            continue
    return Loaded(state=state, events=events, last_seq=replayed.last_seq)
