"""The one clock and the one id factory of a process, built at its composition root.

Shells take both as parameters instead of calling `datetime.now` or `uuid4` where they
happen to need them: a test injects a `ManualClock` and `SequentialIds` and knows every
time and id a decision produced.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Where a shell reads the current time (always timezone-aware UTC)."""

    def now(self) -> datetime:
        """The current time."""
        ...


class Ids(Protocol):
    """Where a shell takes fresh ids; every id is `<prefix>_<token>`, safe as a subject token."""

    def new(self, prefix: str) -> str:
        """A fresh id with the given prefix (e.g. "ev" for an event id)."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        """The current UTC time."""
        return datetime.now(UTC)


class RandomIds:
    """Random ids: 80 bits of uuid4, hex."""

    def new(self, prefix: str) -> str:
        """A fresh random id."""
        return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class ManualClock:
    """A clock that only moves when told to (tests)."""

    at: datetime = field(default_factory=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    def now(self) -> datetime:
        """The time it was set to."""
        return self.at

    def advance(self, seconds: float) -> None:
        """Move the clock forward."""
        self.at += timedelta(seconds=seconds)


@dataclass
class SequentialIds:
    """Predictable ids `<prefix>_<n>` (tests)."""

    _counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def new(self, prefix: str) -> str:
        """The next id."""
        return f"{prefix}_{next(self._counter)}"


SYSTEM_CLOCK = SystemClock()
RANDOM_IDS = RandomIds()
