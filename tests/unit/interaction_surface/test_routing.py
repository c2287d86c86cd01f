"""Properties of the pure delivery routing (no broker)."""

from __future__ import annotations

import typing
from dataclasses import replace
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
from services.interaction_surface.chat.routing import (
    ACTED_ON,
    Channels,
    Route,
    lost_reason,
    needs_liveness,
    route,
    sent_event,
)

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
channels = st.builds(
    Channels,
    local_call=st.booleans(),
    live_call=st.booleans(),
    agent=st.booleans(),
    sent_on_voice=st.booleans(),
    sent_on_agent=st.booleans(),
)


@settings(max_examples=500, deadline=None)
@given(deliveries, channels)
def test_routing_never_sends_to_a_channel_the_session_does_not_have(
    state: DeliveryState, have: Channels
) -> None:
    step = route(state, have)
    if step is Route.SPEAK:
        assert have.local_call
    if step is Route.LEAVE_TO_OWNER:
        assert have.live_call
        assert not have.local_call
    if step is Route.AGENT:
        assert have.agent
        assert not have.local_call
        assert not have.live_call
    if step is Route.SETTLE_VOICE:
        assert have.sent_on_voice
    if step is Route.SETTLE_AGENT:
        assert have.sent_on_agent
        assert not have.sent_on_voice


@settings(max_examples=500, deadline=None)
@given(deliveries, channels)
def test_only_a_handed_over_delivery_is_sent_and_only_a_sent_one_is_finished(
    state: DeliveryState, have: Channels
) -> None:
    step = route(state, have)
    sending = {Route.SPEAK, Route.LEAVE_TO_OWNER, Route.AGENT, Route.CHAT}
    finishing = {Route.SETTLE_VOICE, Route.SETTLE_AGENT, Route.FINISH_CHAT}
    assert (step in sending) == state.handed_off
    assert (step in finishing) == (state.status is DeliveryStatus.SENT and not state.handed_off)
    if not state.handed_off and state.status is not DeliveryStatus.SENT:
        assert step is Route.NOTHING


@settings(max_examples=300, deadline=None)
@given(deliveries, channels)
def test_a_call_held_elsewhere_is_only_looked_up_when_it_can_change_the_route(
    state: DeliveryState, have: Channels
) -> None:
    asked = needs_liveness(state, local_call=have.local_call)
    if not asked:
        # The answer would not be looked up: whatever it is, the route is the same.
        with_call = replace(have, live_call=True)
        without = replace(have, live_call=False)
        assert route(state, with_call) is route(state, without)


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
    state: DeliveryState, have: Channels
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
        if isinstance(event, ACTED_ON) or route(after, have) is Route.NOTHING:
            continue
        assert start is not None, type(event).__name__
        assert route(start, have) is route(after, have), type(event).__name__
        assert (start.handed_off, start.status) == (after.handed_off, after.status)
