"""The one write path: decide on the current state, append guarded, decide again on a conflict."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

from libs.bus import (
    Aggregate,
    Appended,
    ConcurrencyConflict,
    ConflictRetry,
    MemoryEventStore,
    Repository,
    TooManyConflicts,
)
from libs.clock import ManualClock, SequentialIds
from libs.domain import delivery
from libs.domain.delivery import DeliveryState, DeliveryStatus
from libs.events import (
    DELIVERIES,
    DeliveryDecided,
    DeliveryEvent,
    DeliveryReady,
    DeliverySuppressed,
    Envelope,
    EventCodec,
)

pytestmark = pytest.mark.fast

SUBJECT = "fast.deliveries.s1.d1.*"


def _stamp(
    state: DeliveryState | None, event: DeliveryEvent, event_id: str, now: datetime
) -> Envelope[DeliveryEvent]:
    assert state is not None
    return delivery.envelope_for(state, event, event_id=event_id, now=now)


AGGREGATE: Aggregate[DeliveryState, DeliveryEvent] = Aggregate(
    label="deliveries", stream="memory", codec=DELIVERIES, evolve=delivery.evolve, stamp=_stamp
)


def _ready() -> Envelope[DeliveryEvent]:
    return Envelope(
        event_id="ev_ready",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        session_id="s1",
        delivery_id="d1",
        event=DeliveryReady(
            kind="final", text="Done.", short_text="Done.", source_operation_ids=("op1",)
        ),
    )


def _suppress(
    state: DeliveryState | None, reason: str, now: datetime
) -> Sequence[DeliveryEvent]:
    """Suppress a pending delivery; nothing to do once it is no longer pending."""
    if state is None or state.status is not DeliveryStatus.PENDING:
        return []
    return [DeliverySuppressed(reason=reason)]


def _repo(store: MemoryEventStore, attempts: int = 20) -> Repository[DeliveryState, DeliveryEvent]:
    return Repository(
        store, AGGREGATE, clock=ManualClock(), ids=SequentialIds(), retry=ConflictRetry(attempts)
    )


async def test_run_decides_on_the_folded_state_and_appends_guarded() -> None:
    store = MemoryEventStore()
    await store.append(DELIVERIES, SUBJECT, _ready(), expected_last_subject_seq=0)
    repo = _repo(store)
    written = await repo.run(SUBJECT, _suppress, "stale")
    assert written.state is not None
    assert written.state.status is DeliveryStatus.SUPPRESSED
    assert [type(e.event) for e in written.envelopes] == [DeliverySuppressed]
    assert written.envelopes[0].delivery_id == "d1"
    loaded = await repo.load(SUBJECT)
    assert loaded.last_seq == written.last_seq == 2
    # Decided again on the new state: nothing more to append.
    again = await repo.run(SUBJECT, _suppress, "stale")
    assert again.envelopes == ()
    assert (await repo.load(SUBJECT)).last_seq == 2


class _RacingStore(MemoryEventStore):
    """Another writer appends a decision right before this one's first `races` appends."""

    races: int = 0

    async def append(
        self,
        codec: EventCodec[Any],
        subject: str,
        envelope: Envelope[Any],
        *,
        expected_last_subject_seq: int | None = None,
        msg_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Appended:
        if self.races > 0 and expected_last_subject_seq is not None:
            self.races -= 1
            await super().append(codec, subject, Envelope(
                event_id=f"ev_other_{self.races}", occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
                session_id="s1", delivery_id="d1",
                event=DeliveryDecided(decision="deliver_now", reason="quiet"),
            ))
        return await super().append(
            codec, subject, envelope, expected_last_subject_seq=expected_last_subject_seq,
            msg_id=msg_id, headers=headers,
        )


async def test_a_lost_race_is_read_and_decided_again() -> None:
    store = _RacingStore()
    await store.append(DELIVERIES, SUBJECT, _ready(), expected_last_subject_seq=0)
    store.races = 2
    written = await _repo(store).run(SUBJECT, _suppress, "stale")
    # Two other writers won first; the third attempt saw both and still suppressed.
    loaded = await _repo(store).load(SUBJECT)
    kinds = [type(e.event).__name__ for e in loaded.events]
    assert kinds == ["DeliveryReady", "DeliveryDecided", "DeliveryDecided", "DeliverySuppressed"]
    assert written.last_seq == 4


async def test_losing_every_race_gives_up_with_the_policy_named() -> None:
    store = _RacingStore()
    await store.append(DELIVERIES, SUBJECT, _ready(), expected_last_subject_seq=0)
    store.races = 5
    with pytest.raises(TooManyConflicts) as raised:
        await _repo(store, attempts=3).run(SUBJECT, _suppress, "stale")
    assert raised.value.attempts == 3
    # Nothing of the lost decisions was stored.
    kinds = [type(e.event).__name__ for e in (await _repo(store).load(SUBJECT)).events]
    assert "DeliverySuppressed" not in kinds


async def test_a_guarded_append_raises_and_a_record_is_stored_once() -> None:
    store = MemoryEventStore()
    repo = _repo(store)
    await repo.append(SUBJECT, _ready(), expected=0)
    with pytest.raises(ConcurrencyConflict):
        await repo.append(SUBJECT, _ready(), expected=0)
    first = await repo.record("fast.interaction.s1.session", _ready(), msg_id="message-d1")
    second = await repo.record("fast.interaction.s1.session", _ready(), msg_id="message-d1")
    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq


async def test_retrying_runs_a_step_again_after_catching_up_then_gives_up() -> None:
    store = MemoryEventStore()
    repo = _repo(store, attempts=3)
    await repo.append(SUBJECT, _ready(), expected=0)
    steps: list[int] = []
    refreshed: list[int] = []

    async def step() -> str:
        steps.append(len(steps))
        if len(steps) < 3:
            # Decided on a sequence someone else has moved past.
            await repo.append(SUBJECT, _ready(), expected=0)
        return "done"

    async def refresh() -> None:
        refreshed.append(len(steps))

    assert await repo.retrying(SUBJECT, step, refresh=refresh) == "done"
    assert steps == [0, 1, 2]
    assert refreshed == [1, 2]

    async def always_late() -> None:
        await repo.append(SUBJECT, _ready(), expected=0)

    with pytest.raises(TooManyConflicts) as raised:
        await repo.retrying(SUBJECT, always_late)
    assert raised.value.attempts == 3


async def test_a_record_that_is_not_an_event_is_put_once() -> None:
    store = MemoryEventStore()
    first = await store.put("fast.dlq.operations.s1", b"letter", msg_id="dlq:op1:3")
    again = await store.put("fast.dlq.operations.s1", b"letter", msg_id="dlq:op1:3")
    assert not first.duplicate
    assert again.duplicate
    assert again.seq == first.seq
    assert store.records("fast.dlq.>") == [b"letter"]
