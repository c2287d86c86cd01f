"""Which members of an open batch count as silent past the grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from libs.domain.batch import BatchState
from services.batch_coordinator.domain import silent_members

T0 = datetime(2026, 1, 1, 12, tzinfo=UTC)


def test_only_members_silent_past_the_grace_of_an_open_batch_are_named() -> None:
    state = BatchState(
        batch_id="b", session_id="s", members=("op1", "op2", "op3"),
        tools=("grant", "book", "pay"), opened_at=T0,
    )
    heard = {"op1"}.__contains__
    grace = timedelta(seconds=10)
    assert silent_members(state, heard, T0 + timedelta(seconds=9), grace) == []
    assert silent_members(state, heard, T0 + timedelta(seconds=10), grace) == [
        ("op2", "book"), ("op3", "pay"),
    ]
    # An older batch names no tools; a closed one names nobody.
    older = BatchState(batch_id="b", session_id="s", members=("op2",), opened_at=T0)
    assert silent_members(older, heard, T0 + grace, grace) == [("op2", "")]
    closed = BatchState(
        batch_id="b", session_id="s", members=("op2",), opened_at=T0, final_delivery_id="d"
    )
    assert silent_members(closed, heard, T0 + grace, grace) == []
