"""Load, decide, append: the shell around a pure decider for one aggregate subject."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from nats.js import JetStreamContext

from libs.config import DEFAULT_TIMINGS, BusTimings
from libs.events import Envelope, EventCodec

from .ports import EventStore
from .store import NatsEventStore

S = TypeVar("S")
B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class Loaded(Generic[S, B]):
    """An aggregate's state, its events, and the subject sequence it was decided from."""

    state: S | None
    events: list[Envelope[B]]
    last_seq: int


async def load(
    js: JetStreamContext,
    stream: str,
    subject: str,
    codec: EventCodec[B],
    evolve: Callable[[S | None, Envelope[B]], S],
    *,
    timings: BusTimings = DEFAULT_TIMINGS,
) -> Loaded[S, B]:
    """Fold every event on one subject into its state (see `load_from`)."""
    store = NatsEventStore(js, {}, timings=timings)
    return await load_from(store, stream, subject, codec, evolve)


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
