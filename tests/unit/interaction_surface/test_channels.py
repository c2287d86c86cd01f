"""The delivery executor over its channels, and the surface's view-backed writes (no broker).

The executor is given fake channels that report what a test says and record what they are
asked to do; the live view is fed by an in-memory event store, as its followers feed it from
the broker.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from libs.bus import (
    Appended,
    ConcurrencyConflict,
    ConflictRetry,
    Context,
    MemoryEventStore,
    TooManyConflicts,
    Topology,
)
from libs.clock import ManualClock, SequentialIds
from libs.config import BusSettings
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import (
    DELIVERIES,
    INTERACTION,
    DeliveryDecided,
    DeliveryDelivered,
    DeliveryEvent,
    DeliveryReady,
    DeliverySent,
    DeliveryUnheard,
    Envelope,
    EventCodec,
    SessionOpened,
    SpeechStarted,
    SpeechStopped,
    TurnReplied,
)
from libs.service import Runtime
from services.interaction_surface.chat.channel import ChatChannel
from services.interaction_surface.core.http import ProblemError
from services.interaction_surface.core.surface import Surface
from services.interaction_surface.core.view import SurfaceView
from services.interaction_surface.core.writes import SurfaceWrites
from services.interaction_surface.delivery.channel import Channel, LookAgain
from services.interaction_surface.delivery.executor import DeliveryExecutor
from services.interaction_surface.delivery.routing import Reach
from services.interaction_surface.settings import Settings
from services.interaction_surface.voice.channel import CallChannel
from services.interaction_surface.voice.ownership import CallOwnership
from services.interaction_surface.voice.registry import CallRegistry

pytestmark = pytest.mark.fast

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TOPOLOGY = Topology("fast")
CONTEXTS = {id(INTERACTION): Context.INTERACTION, id(DELIVERIES): Context.DELIVERIES}


class FeedingStore(MemoryEventStore):
    """The in-memory store, feeding the view what is appended (as its followers would), unless
    a test writes behind the view's back (`silent`)."""

    def __init__(self, view: SurfaceView) -> None:
        super().__init__()
        self.view = view
        self.silent = False

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
        appended = await super().append(
            codec, subject, envelope, expected_last_subject_seq=expected_last_subject_seq,
            msg_id=msg_id, headers=headers,
        )
        if not appended.duplicate and not self.silent:
            self.view.receive(CONTEXTS[id(codec)], envelope, appended.seq)
        return appended


def _env(event: Any, delivery_id: str | None = None, event_id: str = "") -> Envelope[Any]:
    return Envelope(
        event_id=event_id or f"ev_{type(event).__name__}_{delivery_id}",
        occurred_at=NOW,
        session_id="s1",
        batch_id="b1" if delivery_id else None,
        delivery_id=delivery_id,
        event=event,
    )


async def _world(retry: int = 5) -> tuple[SurfaceView, FeedingStore, SurfaceWrites]:
    view = SurfaceView()
    store = FeedingStore(view)
    writes = SurfaceWrites(
        view, store, TOPOLOGY, clock=ManualClock(NOW), ids=SequentialIds(),
        retry=ConflictRetry(retry),
    )
    opened = SessionOpened(user_id="u1", tenant_id="t1", agent="a", token_hash="h")
    await store.append(INTERACTION, TOPOLOGY.session_subject("s1"), _env(opened))
    return view, store, writes


async def _delivery(
    store: FeedingStore, delivery_id: str, *events: DeliveryEvent
) -> None:
    subject = TOPOLOGY.delivery_subject("s1", delivery_id)
    ready = DeliveryReady(kind="final", text="Done.", short_text="Done.", source_operation_ids=())
    for event in (ready, *events):
        await store.append(DELIVERIES, subject, _env(event, delivery_id))


HANDED_OVER = DeliveryDecided(decision="deliver_now", reason="quiet")
SENT_ON_CHAT = DeliverySent(mode="proactive", channel="chat")


# --------------------------------------------------------------------------- the executor


@dataclass(eq=False)
class FakeChannel:
    """Reports what it is told; records what it is asked to do."""

    name: str
    reaches: Reach = Reach.ABSENT
    holds: bool = False
    stranded: bool = False
    speaking: set[str] = field(default_factory=set)
    conflicts: int = 0
    gone_once: bool = False
    done: list[tuple[str, str]] = field(default_factory=list)
    swept: int = 0

    def busy(self, delivery_id: str) -> bool:
        return delivery_id in self.speaking

    async def reach(self, state: DeliveryState) -> Reach:
        return self.reaches

    async def hand_over(self, state: DeliveryState) -> None:
        if self.conflicts:
            self.conflicts -= 1
            raise ConcurrencyConflict("subject", 1)
        if self.gone_once:
            self.gone_once = False
            self.reaches = Reach.ABSENT
            raise LookAgain(state.delivery_id)
        self.done.append(("hand_over", state.delivery_id))

    def holds_sent(self, state: DeliveryState) -> bool:
        return self.holds

    async def settle(self, state: DeliveryState) -> None:
        self.done.append(("settle", state.delivery_id))

    def strandable(self, state: DeliveryState) -> bool:
        return self.stranded

    async def sweep(self) -> None:
        self.swept += 1


def _chat() -> FakeChannel:
    """Chat as the composition root places it: last, taking and finishing anything."""
    return FakeChannel("chat", reaches=Reach.TAKES, holds=True)


async def _execute(channels: Sequence[Channel], *events: DeliveryEvent) -> SurfaceView:
    view, store, _ = await _world()
    await _delivery(store, "d1", *events)
    await DeliveryExecutor(view, channels).execute("d1")
    return view


async def test_a_handed_over_delivery_goes_to_the_first_channel_that_takes_it() -> None:
    call, agent, chat = FakeChannel("call"), FakeChannel("agent", Reach.TAKES), _chat()
    await _execute((call, agent, chat), HANDED_OVER)
    assert (call.done, agent.done, chat.done) == ([], [("hand_over", "d1")], [])


async def test_chat_takes_what_no_other_channel_reaches() -> None:
    call, agent, chat = FakeChannel("call"), FakeChannel("agent"), _chat()
    await _execute((call, agent, chat), HANDED_OVER)
    assert (call.done, agent.done, chat.done) == ([], [], [("hand_over", "d1")])


async def test_a_call_held_by_another_live_surface_is_left_to_its_owner() -> None:
    call, agent, chat = FakeChannel("call", Reach.HELD_ELSEWHERE), FakeChannel("agent"), _chat()
    agent.reaches = Reach.TAKES
    await _execute((call, agent, chat), HANDED_OVER)
    assert (call.done, agent.done, chat.done) == ([], [], [])


async def test_a_sent_delivery_is_settled_by_the_channel_that_holds_it() -> None:
    call, agent, chat = FakeChannel("call"), FakeChannel("agent", holds=True), _chat()
    await _execute((call, agent, chat), HANDED_OVER, SENT_ON_CHAT)
    assert (call.done, agent.done, chat.done) == ([], [("settle", "d1")], [])
    call2, agent2, chat2 = FakeChannel("call"), FakeChannel("agent"), _chat()
    await _execute((call2, agent2, chat2), HANDED_OVER, SENT_ON_CHAT)
    assert (call2.done, agent2.done, chat2.done) == ([], [], [("settle", "d1")])


async def test_a_delivery_a_channel_is_saying_is_left_alone() -> None:
    call, chat = FakeChannel("call", Reach.TAKES, speaking={"d1"}), _chat()
    await _execute((call, chat), HANDED_OVER)
    assert (call.done, chat.done) == ([], [])


async def test_a_pending_delivery_asks_nothing_of_any_channel() -> None:
    call, chat = FakeChannel("call", Reach.TAKES, holds=True), _chat()
    await _execute((call, chat))
    assert (call.done, chat.done) == ([], [])


async def test_a_lost_race_or_a_vanished_call_routes_again() -> None:
    call, chat = FakeChannel("call", Reach.TAKES, conflicts=2), _chat()
    await _execute((call, chat), HANDED_OVER)
    assert (call.done, chat.done) == ([("hand_over", "d1")], [])
    gone, chat2 = FakeChannel("call", Reach.TAKES, gone_once=True), _chat()
    await _execute((gone, chat2), HANDED_OVER)
    assert (gone.done, chat2.done) == ([], [("hand_over", "d1")])


async def test_past_the_conflict_policy_the_executor_gives_up() -> None:
    call, chat = FakeChannel("call", Reach.TAKES, conflicts=100), _chat()
    with pytest.raises(TooManyConflicts):
        await _execute((call, chat), HANDED_OVER)


async def test_the_sweep_looks_at_stranded_deliveries_then_every_channel_sweeps() -> None:
    view, store, _ = await _world()
    await _delivery(store, "d1", HANDED_OVER, SENT_ON_CHAT)
    await _delivery(store, "d2", HANDED_OVER, SENT_ON_CHAT)
    await _delivery(store, "d3")
    call = FakeChannel("call", holds=True, stranded=True, speaking={"d2"})
    chat = _chat()
    looked_at = await DeliveryExecutor(view, (call, chat)).sweep()
    assert looked_at == 1
    assert call.done == [("settle", "d1")]
    assert (call.swept, chat.swept) == (1, 1)


# --------------------------------------------------------------------------- the view source


async def test_a_guarded_delivery_append_takes_the_sequence_the_view_holds() -> None:
    view, store, writes = await _world()
    await _delivery(store, "d1", HANDED_OVER)
    state = view.deliveries.get("d1")
    assert state is not None
    # Someone writes behind the view's back: the view's sequence is stale, the append loses.
    store.silent = True
    await store.append(
        DELIVERIES, TOPOLOGY.delivery_subject("s1", "d1"), _env(SENT_ON_CHAT, "d1", "ev_other")
    )
    store.silent = False
    with pytest.raises(ConcurrencyConflict):
        await writes.delivery(state, SENT_ON_CHAT)
    # Once the view has it, the next append is guarded by the new sequence and seen at once.
    replay = await store.read_subject("memory", TOPOLOGY.delivery_subject("s1", "d1"), DELIVERIES)
    last = replay.items[-1]
    view.receive(Context.DELIVERIES, last.envelope, last.stream_seq)
    current = view.deliveries.get("d1")
    assert current is not None
    assert current.status is DeliveryStatus.SENT
    seq = await writes.delivery(current, DeliveryDelivered())
    assert view.delivery_seq("d1") == seq
    assert view.deliveries.get("d1").status is DeliveryStatus.DELIVERED  # type: ignore[union-attr]


async def test_run_decides_on_the_view_and_gives_up_under_the_one_policy() -> None:
    view, store, writes = await _world(retry=3)
    await _delivery(store, "d1", HANDED_OVER)
    subject = TOPOLOGY.delivery_subject("s1", "d1")
    seen: list[DeliveryStatus | None] = []

    def decide(state: DeliveryState | None, event: DeliveryEvent, _now: datetime) -> list[Any]:
        seen.append(state.status if state is not None else None)
        return [event]

    def stamp(
        state: DeliveryState | None, event: DeliveryEvent, event_id: str, now: datetime
    ) -> Envelope[DeliveryEvent]:
        return _env(event, "d1", event_id)

    written = await writes.deliveries.run(subject, decide, SENT_ON_CHAT, stamp=stamp)
    assert seen == [DeliveryStatus.PENDING]
    # Read your writes: the view applied it before `run` returned.
    assert view.deliveries.get("d1").status is DeliveryStatus.SENT  # type: ignore[union-attr]
    assert written.last_seq == view.delivery_seq("d1")
    # A view that never catches up (someone else keeps winning): every attempt loses.
    store.silent = True
    await store.append(DELIVERIES, subject, _env(SENT_ON_CHAT, "d1", "ev_behind"))
    with pytest.raises(TooManyConflicts):
        await writes.deliveries.run(subject, decide, SENT_ON_CHAT, stamp=stamp)
    assert len(seen) == 1 + 3


async def test_a_duplicate_record_does_not_wait_for_the_view() -> None:
    view, store, writes = await _world()
    await _delivery(store, "d1", HANDED_OVER)
    state = view.deliveries.get("d1")
    assert state is not None
    # Another writer stored the message; this view has not applied it (and never will here).
    store.silent = True
    await store.append(
        INTERACTION, TOPOLOGY.session_subject("s1"), _env(TurnReplied(text="Done."), "d1", "ev_x"),
        msg_id="message-d1",
    )
    store.silent = False
    await writes.write_message(state)  # would time out waiting for the view if it waited
    found = view.log("s1")
    assert found is not None
    assert "d1" not in found.written


# --------------------------------------------------------------------------- real channels


async def test_chat_sends_writes_the_message_once_and_marks_it_delivered() -> None:
    view, store, writes = await _world()
    await _delivery(store, "d1", HANDED_OVER)
    calls = CallChannel(
        view, writes, CallRegistry(), CallOwnership("surface_1", 10.0),
        clock=ManualClock(NOW), ids=SequentialIds(),
    )
    chat = ChatChannel(view, writes, clock=ManualClock(NOW), turn_timeout_s=1.0)
    executor = DeliveryExecutor(view, (calls, chat))
    await executor.execute("d1")
    await executor.execute("d1")  # a redelivery finds it settled
    state = view.deliveries.get("d1")
    assert state is not None
    assert state.status is DeliveryStatus.DELIVERED
    found = view.log("s1")
    assert found is not None
    messages = [e for e in found.entries if isinstance(e.envelope.event, TurnReplied)]
    assert [m.envelope.delivery_id for m in messages] == ["d1"]


async def test_a_delivery_sent_on_a_call_that_ended_goes_back_unheard() -> None:
    view, store, writes = await _world()
    await _delivery(store, "d1", HANDED_OVER, DeliverySent(mode="proactive", channel="voice"))
    calls = CallChannel(
        view, writes, CallRegistry(), CallOwnership("surface_1", 10.0),
        clock=ManualClock(NOW), ids=SequentialIds(),
    )
    chat = ChatChannel(view, writes, clock=ManualClock(NOW), turn_timeout_s=1.0)
    # Chat would finish any send: the call channel, first, holds this one.
    await DeliveryExecutor(view, (calls, chat)).execute("d1")
    state = view.deliveries.get("d1")
    assert state is not None
    assert state.status is not DeliveryStatus.DELIVERED
    found = view.log("s1")
    assert found is not None
    events = [e.envelope.event for e in found.entries]
    assert [e.reason for e in events if isinstance(e, DeliveryUnheard)] == ["call_ended"]


async def test_a_session_write_that_keeps_losing_is_a_409() -> None:
    view, store, writes = await _world(retry=2)
    surface = Surface(
        runtime=Runtime(name="fast", settings=BusSettings(prefix="fast"), publishes=()),
        view=view, settings=Settings.from_env(), writes=writes, clock=ManualClock(NOW),
        ids=SequentialIds(),
    )
    done = await surface.append_interaction("s1", SpeechStarted(stream_ms=0), expect=True)
    last = await store.last_seq("memory", TOPOLOGY.session_subject("s1"))
    assert view.log("s1").session_seq == last  # type: ignore[union-attr]
    assert done.event == SpeechStarted(stream_ms=0)
    store.silent = True
    await store.append(
        INTERACTION, TOPOLOGY.session_subject("s1"), _env(SpeechStopped(stream_ms=0), None, "x")
    )
    store.silent = False
    with pytest.raises(ProblemError) as refused:
        await surface.append_interaction("s1", SpeechStopped(stream_ms=0), expect=True)
    assert refused.value.status == 409
    # Unguarded, it is written whatever the view's sequence.
    await surface.append_interaction("s1", SpeechStopped(stream_ms=0), expect=False)
