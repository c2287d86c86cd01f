"""Building envelopes in tests without repeating the bookkeeping fields."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from typing import Any, TypeVar

from libs.events import Envelope

B = TypeVar("B")
_COUNTER = itertools.count(1)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def envelope(
    event: B, *, session_id: str = "s1", event_id: str | None = None, **ids: Any
) -> Envelope[B]:
    """An envelope with a fresh event id and a fixed clock."""
    return Envelope(
        event_id=event_id or f"e{next(_COUNTER)}",
        occurred_at=T0,
        session_id=session_id,
        event=event,
        **ids,
    )
