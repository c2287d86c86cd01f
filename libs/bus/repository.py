"""One write path: load an aggregate, decide, append with the expected sequence, retry.

Every shell writes through a `Repository` over the `EventStore` port (JetStream in the
services, memory in unit tests); nothing else appends. A repository is one aggregate type
(`Aggregate`: its stream's codec, its fold, how an event is stamped into an envelope) plus
the process's clock, id factory and the one conflict policy (`ConflictRetry`).

- `run(subject, decide, command)`: read the state, `decide(state, command, now)`, stamp the
  events with fresh ids and the clock's time, append them in order, each guarded by the
  sequence of the one before; a `ConcurrencyConflict` (someone wrote since the read) reads
  again and decides again, up to the policy's attempts, then `TooManyConflicts`.
- Where the state comes from is a `StateSource`: by default the aggregate's subject folded
  from the store (`FoldedSource`); a shell that keeps a live projection (the surface's view)
  passes its own, which reads the view, catches it up after a conflict and waits until the
  view has applied what was appended.
- `record(subject, envelope, msg_id=...)`: a fact that no decision guards (a reply, a call's
  end), stored once under its message id.
- `append(subject, envelope, expected=...)`: one guarded append decided elsewhere (a pure
  planner that already read the state); conflicts are the caller's to handle.
- `retrying(subject, step)`: the conflict policy for a shell whose decision has effects
  between its read and its append (a claim, another aggregate's append, a pause point):
  the step runs again after a conflict, once the state is caught up.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar

from libs.clock import Clock, Ids
from libs.events import Envelope, EventCodec
from libs.metrics import EVENTS_PUBLISHED

from .aggregate import Loaded, load_from
from .ports import EventStore
from .store import Appended, ConcurrencyConflict

S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)
E = TypeVar("E")
C = TypeVar("C")
T = TypeVar("T")


class TooManyConflicts(Exception):
    """Every attempt of a decision lost its race: the aggregate is changing too fast."""

    def __init__(self, subject: str, attempts: int) -> None:
        super().__init__(f"{subject}: {attempts} concurrent writers won in a row")
        self.subject = subject
        self.attempts = attempts


@dataclass(frozen=True, slots=True)
class ConflictRetry:
    """How often a decision is read and made again after losing a race (the one policy)."""

    attempts: int = 20


CONFLICT_RETRY = ConflictRetry()


@dataclass(frozen=True, slots=True)
class Aggregate(Generic[S, E]):
    """One aggregate type: where its events live, how they fold and how they are stamped."""

    # The stream's label in metrics ("operations", "deliveries", ...).
    label: str
    stream: str
    codec: EventCodec[E]
    evolve: Callable[[S | None, Envelope[E]], S]
    stamp: Callable[[S | None, E, str, datetime], Envelope[E]] | None = None


class StateSource(Protocol[S_co]):
    """Where a repository reads the state a decision is made from."""

    async def current(self, subject: str) -> tuple[S_co, int]:
        """The state and the subject's last sequence it reflects (0: empty)."""
        ...

    async def refresh(self, subject: str) -> None:
        """Catch up after a conflict, before `current` is asked again."""
        ...

    async def stored(self, envelope: Envelope[Any], appended: Appended) -> None:
        """An event was appended (or found a duplicate); called once per event."""
        ...


@dataclass(frozen=True, slots=True)
class Written(Generic[S, E]):
    """What a decision appended, and the state and sequence after it."""

    state: S
    last_seq: int
    envelopes: tuple[Envelope[E], ...]


class FoldedSource(Generic[S, E]):
    """The state folded from the aggregate's subject in the store, read anew every time."""

    def __init__(self, store: EventStore, aggregate: Aggregate[S, E]) -> None:
        self._store = store
        self._aggregate = aggregate

    async def current(self, subject: str) -> tuple[S | None, int]:
        loaded = await load_from(
            self._store, self._aggregate.stream, subject, self._aggregate.codec,
            self._aggregate.evolve,
        )
        return loaded.state, loaded.last_seq

    async def refresh(self, subject: str) -> None:
        """Nothing is cached: the next read is fresh."""

    async def stored(self, envelope: Envelope[Any], appended: Appended) -> None:
        """Nothing to catch up."""


class Repository(Generic[S, E]):
    """Loads, decides and appends one aggregate type through the event store port."""

    def __init__(
        self,
        store: EventStore,
        aggregate: Aggregate[S, E],
        *,
        clock: Clock,
        ids: Ids,
        retry: ConflictRetry = CONFLICT_RETRY,
        source: StateSource[S | None] | None = None,
    ) -> None:
        self.store = store
        self.aggregate = aggregate
        self._clock = clock
        self._ids = ids
        self._retry = retry
        folded: StateSource[S | None] = FoldedSource[S, E](store, aggregate)
        self._source = source or folded

    async def load(self, subject: str) -> Loaded[S, E]:
        """The aggregate's events on `subject`, folded, and the sequence they end at."""
        return await load_from(
            self.store, self.aggregate.stream, subject, self.aggregate.codec,
            self.aggregate.evolve,
        )

    async def run(
        self,
        subject: str,
        decide: Callable[[S | None, C, datetime], Sequence[E]],
        command: C,
        *,
        stamp: Callable[[S | None, E, str, datetime], Envelope[E]] | None = None,
        msg_ids: Callable[[Envelope[E]], str | None] | None = None,
    ) -> Written[S | None, E]:
        """Decide on the current state and append what was decided, again on a conflict."""
        stamper = stamp or self.aggregate.stamp
        if stamper is None:
            raise TypeError(f"{self.aggregate.label}: no stamp for its events")
        for _ in range(self._retry.attempts):
            state, seq = await self._source.current(subject)
            now = self._clock.now()
            events = decide(state, command, now)
            if not events:
                return Written(state=state, last_seq=seq, envelopes=())
            envelopes = [stamper(state, event, self._ids.new("ev"), now) for event in events]
            try:
                state, seq = await self._append_all(subject, state, seq, envelopes, msg_ids)
            except ConcurrencyConflict:
                await self._source.refresh(subject)
                continue
            return Written(state=state, last_seq=seq, envelopes=tuple(envelopes))
        raise TooManyConflicts(subject, self._retry.attempts)

    async def append(
        self,
        subject: str,
        envelope: Envelope[E],
        *,
        expected: int | None,
        msg_id: str | None = None,
    ) -> Appended:
        """One append decided elsewhere, guarded by `expected` (None: unguarded)."""
        appended = await self.store.append(
            self.aggregate.codec, subject, envelope,
            expected_last_subject_seq=expected, msg_id=msg_id,
        )
        EVENTS_PUBLISHED.labels(stream=self.aggregate.label).inc()
        await self._source.stored(envelope, appended)
        return appended

    async def record(
        self, subject: str, envelope: Envelope[E], *, msg_id: str | None = None
    ) -> Appended:
        """A fact no decision guards, stored once under its message id (default: its id)."""
        return await self.append(subject, envelope, expected=None, msg_id=msg_id)

    async def retrying(
        self,
        subject: str,
        step: Callable[[], Awaitable[T]],
        *,
        refresh: Callable[[], Awaitable[None]] | None = None,
    ) -> T:
        """Run `step` (which reads, decides and appends guarded) until no
        `ConcurrencyConflict` ends it, catching up in between (`refresh`, by default the
        state source's), up to the policy's attempts, then `TooManyConflicts`."""
        for _ in range(self._retry.attempts):
            try:
                return await step()
            except ConcurrencyConflict:
                await (refresh() if refresh is not None else self._source.refresh(subject))
        raise TooManyConflicts(subject, self._retry.attempts)

    async def _append_all(
        self,
        subject: str,
        state: S | None,
        seq: int,
        envelopes: Sequence[Envelope[E]],
        msg_ids: Callable[[Envelope[E]], str | None] | None,
    ) -> tuple[S | None, int]:
        for envelope in envelopes:
            msg_id = msg_ids(envelope) if msg_ids is not None else None
            appended = await self.append(subject, envelope, expected=seq, msg_id=msg_id)
            # A refused event stays in history, not in state (as `load_from` folds it).
            with contextlib.suppress(Exception):
                state = self.aggregate.evolve(state, envelope)
            seq = appended.seq
        return state, seq
