"""A keyed projection: folds events into per-aggregate state, idempotent under redelivery.

Events of one aggregate arrive in stream order, so any stream sequence at or below the last
one applied for that key is a redelivery and is skipped. An event the state machine refuses
is recorded with its reason and leaves the state as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from libs.events import Envelope

S = TypeVar("S")
E = TypeVar("E")


@dataclass(frozen=True, slots=True)
class Refused:
    """An event the projection could not apply, and why."""

    key: str
    stream_seq: int
    reason: str


class Projection(Generic[S, E]):
    """Per-key state built by `evolve`, with redelivery skipping and refusal recording."""

    def __init__(
        self,
        evolve: Callable[[S | None, Envelope[E]], S],
        key: Callable[[Envelope[E]], str],
    ) -> None:
        self._evolve = evolve
        self._key = key
        self.states: dict[str, S] = {}
        self.last_seq: dict[str, int] = {}
        self.refused: list[Refused] = []

    def apply(self, envelope: Envelope[E], stream_seq: int) -> S | None:
        """Fold one event; returns the key's state afterwards."""
        key = self._key(envelope)
        if stream_seq <= self.last_seq.get(key, 0):
            return self.states.get(key)
        self.last_seq[key] = stream_seq
        try:
            state = self._evolve(self.states.get(key), envelope)
        except Exception as exc:  # noqa: BLE001 - every refusal is recorded, none is fatal
            self.refused.append(Refused(key=key, stream_seq=stream_seq, reason=str(exc)))
            return self.states.get(key)
        self.states[key] = state
        return state

    def get(self, key: str) -> S | None:
        """Current state of one key."""
        return self.states.get(key)
