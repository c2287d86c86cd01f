"""Properties of the pure delivery routing (no broker)."""

from __future__ import annotations

import typing
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from libs.domain import DeliveryState, delivery
from libs.domain.delivery import DeliveryStatus, IllegalDeliveryTransition
from libs.events import (
    DeliveryAttached,
    DeliveryDecided,
    DeliveryDelivered,
    DeliveryEvent,
    DeliveryReady,
    DeliveryReconciliationRequested,
    DeliveryRequeued,
    DeliverySent,
    DeliverySpoken,
    DeliverySuperseded,
    DeliverySuppressed,
    DeliveryUnheard,
    Envelope,
)
from libs.events.deliveries import Decision
from services.interaction_surface.delivery.channel import sent_event
from services.interaction_surface.delivery.routing import (
    ACTED_ON,
    NOTHING,
    Act,
    Reach,
    Report,
    channel_question,
    route,
)
from services.interaction_surface.voice.channel import lost_reason

deliveries = st.builds(
    DeliveryState,
    delivery_id=st.just("del_1"),
    session_id=st.just("sess_1"),
    batch_id=st.just("batch_1"),
    status=st.sampled_from(list(DeliveryStatus)),
    kind=st.sampled_from(["final", "progress"]),
    priority=st.sampled_from(["normal", "urgent"]),
    text=st.just("done"),
    short_text=st.just("done"),
    decision=st.none()
    | st.sampled_from(
        ["deliver_now", "interrupt", "wait_for_quiet", "after_playback", "attach_next_turn"]
    ),
)
# What each channel of the executor (in its order) reports about the delivery.
channels = st.lists(
    st.builds(Report, reach=st.sampled_from(list(Reach)), holds_sent=st.booleans()),
    min_size=0,
    max_size=4,
)


@settings(max_examples=500, deadline=None)
@given(deliveries, channels)
def test_routing_never_sends_to_a_channel_the_session_does_not_have(
    state: DeliveryState, have: list[Report]
) -> None:
    step = route(state, have)
    if step.act is Act.NOTHING:
        assert step.channel is None
        return
    assert step.channel is not None
    chosen, before = have[step.channel], have[: step.channel]
    if step.act is Act.HAND_OVER:
        assert chosen.reach is Reach.TAKES
    if step.act is Act.LEAVE_TO_OWNER:
        assert chosen.reach is Reach.HELD_ELSEWHERE
    if step.act in (Act.HAND_OVER, Act.LEAVE_TO_OWNER):
        # A channel earlier in the order that reaches the session would have had it.
        assert all(r.reach is Reach.ABSENT for r in before)
    if step.act is Act.SETTLE:
        assert chosen.holds_sent
        assert not any(r.holds_sent for r in before)


@settings(max_examples=500, deadline=None)
@given(deliveries, channels)
def test_only_a_handed_over_delivery_is_sent_and_only_a_sent_one_is_finished(
    state: DeliveryState, have: list[Report]
) -> None:
    step = route(state, have)
    sending = {Act.HAND_OVER, Act.LEAVE_TO_OWNER}
    assert (step.act in sending) <= state.handed_off
    assert (step.act is Act.SETTLE) <= (
        state.status is DeliveryStatus.SENT and not state.handed_off
    )
    if not state.handed_off and state.status is not DeliveryStatus.SENT:
        assert step == NOTHING
        assert channel_question(state) is None
    # With chat last (it always takes a delivery and finishes any send), nothing handed
    # over or sent is ever left without a step.
    with_chat = [*have, Report(reach=Reach.TAKES, holds_sent=True)]
    if state.handed_off:
        assert route(state, with_chat).act in sending
    elif state.status is DeliveryStatus.SENT:
        assert route(state, with_chat).act is Act.SETTLE


@settings(max_examples=300, deadline=None)
@given(deliveries, channels, channels)
def test_a_channel_after_the_one_that_answers_cannot_change_the_route(
    state: DeliveryState, have: list[Report], later: list[Report]
) -> None:
    step = route(state, have)
    if step.channel is not None:
        kept = have[: step.channel + 1]
        assert route(state, [*kept, *later]) == step


@settings(max_examples=200, deadline=None)
@given(deliveries, st.sampled_from(["chat", "voice"]))
def test_the_sent_mark_keeps_the_channel_and_an_interrupt_stays_one(
    state: DeliveryState, channel: str
) -> None:
    assert channel in ("chat", "voice")
    sent = sent_event(state, "chat" if channel == "chat" else "voice")
    assert sent.channel == channel
    assert (sent.mode == "interrupt") == (state.decision == "interrupt")


def test_a_call_nobody_holds_is_lost_and_no_call_is_ended() -> None:
    assert lost_reason(["call_1"]) == "call_lost"
    assert lost_reason([]) == "call_ended"


# One event of every delivery kind, in each of its shapes that the fold reads differently.
EVERY_KIND: tuple[DeliveryEvent, ...] = (
    DeliveryReady(kind="final", text="done", short_text="done", source_operation_ids=("op_1",)),
    *(
        DeliveryDecided(decision=d, reason="r")
        for d in typing.get_args(Decision)
    ),
    DeliverySent(mode="proactive", channel="chat"),
    DeliverySent(mode="interrupt", channel="voice"),
    DeliverySent(mode="proactive", channel="agent", connection_id="conn_1"),
    DeliveryDelivered(),
    DeliverySpoken(),
    DeliveryUnheard(played_ms=10, reason="barge_in"),
    DeliverySuppressed(reason="r"),
    DeliverySuperseded(by_delivery_id="del_2", reason="r"),
    DeliveryAttached(attached_to_turn_id="turn_1"),
    DeliveryRequeued(text="shorter", reason="r"),
    DeliveryReconciliationRequested(operation_ids=("op_1",), reason="r"),
)


def _envelope(event: DeliveryEvent) -> Envelope[DeliveryEvent]:
    return Envelope(
        event_id="ev_1",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        session_id="sess_1",
        batch_id="batch_1",
        delivery_id="del_1",
        event=event,
    )


def test_every_delivery_kind_is_exercised() -> None:
    assert {type(e) for e in EVERY_KIND} == set(typing.get_args(DeliveryEvent))


@settings(max_examples=300, deadline=None)
@given(deliveries, channels)
def test_only_the_kinds_the_executor_hears_put_a_delivery_in_its_hands(
    state: DeliveryState, have: list[Report]
) -> None:
    """The executor's consumer is delivered `ACTED_ON` only. Every other kind, from any
    state, leads to a state with nothing to do, or leaves a step that was already there
    (and was asked for by the event that made it)."""
    for event in EVERY_KIND:
        start: DeliveryState | None = None if isinstance(event, DeliveryReady) else state
        try:
            after = delivery.evolve(start, _envelope(event))
        except IllegalDeliveryTransition:
            continue
        if isinstance(event, ACTED_ON) or route(after, have) == NOTHING:
            continue
        assert start is not None, type(event).__name__
        assert route(start, have) == route(after, have), type(event).__name__
        assert (start.handed_off, start.status) == (after.handed_off, after.status)
