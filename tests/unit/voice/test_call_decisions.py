"""The decisions the call shell (call.py) carries out, without a socket: what a barge-in
settles or suspends and records, what a cut reply keeps, when a queued utterance is dropped,
how far sending runs ahead, and the answer to a doubtful hearing (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from libs.events import BargeIn, PlaybackFinished, ReplyTruncated, ResponseCancel
from services.interaction_surface.voice import dtmf
from services.interaction_surface.voice import playback as pb
from services.interaction_surface.voice import turn_taking as tt
from services.interaction_surface.voice.playback import Settled, Utterance

WORDS = st.lists(st.sampled_from(["book", "a", "table", "for", "two", "at", "nine"]), max_size=8)


PLAYBACK_IDS = st.sampled_from(["p1", "p1.resume1", "p1.resume1.resume2"])


@st.composite
def settled(draw: st.DrawFn) -> Settled:
    text = " ".join(draw(WORDS))
    duration = draw(st.integers(0, 5000))
    u = Utterance(
        playback_id=draw(PLAYBACK_IDS),
        text=text,
        started_ms=0,
        duration_ms=duration,
        delivery_id=draw(st.none() | st.just("d1")),
        response_id=draw(st.none() | st.just("r1")),
        turn_id=draw(st.none() | st.just("t1")),
    )
    heard = draw(st.booleans())
    played = duration if heard else draw(st.integers(0, duration))
    return Settled(u, heard=heard, played_ms=played, reason="test")


# ---------------------------------------------------------------------- barge-in


@given(
    st.lists(settled(), max_size=4), st.booleans(), st.integers(0, 2000)
)
def test_a_cut_keeps_every_flushed_utterance_in_order_and_records_their_totals(
    flushed: list[Settled], recognizing: bool, window_ms: int
) -> None:
    plan = tt.plan_cut(flushed, recognizing=recognizing, false_interruption_ms=window_ms)
    assert [c.item for c in plan.cuts] == flushed
    assert plan.event == BargeIn(
        played_ms=sum(s.played_ms for s in flushed),
        unheard_ms=sum(s.unheard_ms for s in flushed),
    )
    first = flushed[0].utterance if flushed else None
    assert plan.playback_id == (first.playback_id if first else None)
    assert plan.response_id == (first.response_id if first else None)
    assert plan.delivery_id == (first.delivery_id if first else None)
    for cut in plan.cuts:
        # Suspended only when a verdict can come (a recognizer, a window) and it has not
        # resumed too often already.
        resumes = cut.item.utterance.playback_id.count(tt.RESUME)
        assert cut.suspend == (recognizing and window_ms > 0 and resumes < tt.MAX_RESUMES)


def test_a_cut_with_nothing_playing_records_a_barge_in_with_no_ids() -> None:
    plan = tt.plan_cut([], recognizing=True, false_interruption_ms=500)
    assert plan.cuts == ()
    assert plan.event == BargeIn(played_ms=0, unheard_ms=0)
    assert (plan.playback_id, plan.response_id, plan.delivery_id) == (None, None, None)


@given(settled(), st.booleans())
def test_a_resumed_utterance_is_heard_only_when_its_rest_is(
    item: Settled, rest_heard: bool
) -> None:
    rest = Settled(
        Utterance("p1.resume1", "rest", 0, 100), heard=rest_heard, played_ms=0, reason="x"
    )
    after = tt.resumed(item, rest)
    assert after.utterance is item.utterance
    assert after.heard is rest_heard
    assert after.reason == "resumed"
    if rest_heard:
        assert after.played_ms == item.utterance.duration_ms
        assert after.unheard_ms == 0
    else:
        assert after.played_ms == min(item.utterance.duration_ms, item.played_ms)


@given(settled())
def test_a_suspension_settles_unheard_with_what_had_played(item: Settled) -> None:
    after = pb.unheard(item, "barge_in")
    assert (after.heard, after.played_ms, after.reason) == (False, item.played_ms, "barge_in")


# ---------------------------------------------------------------------- what is recorded


@given(settled())
def test_a_settled_utterance_is_recorded_with_its_outcome_and_ids(item: Settled) -> None:
    event, refs = pb.finished(item)
    assert event == PlaybackFinished(
        heard=item.heard, played_ms=item.played_ms, unheard_ms=item.unheard_ms
    )
    u = item.utterance
    assert refs == {
        "playback_id": u.playback_id, "delivery_id": u.delivery_id,
        "response_id": u.response_id, "turn_id": u.turn_id,
    }


@given(settled(), st.dictionaries(st.sampled_from(["d1", "d2", "d3"]), st.text(max_size=12)))
def test_a_cut_reply_keeps_its_heard_words_and_names_the_closings_not_heard(
    item: Settled, texts: dict[str, str]
) -> None:
    attached = ("d1", "d2", "d3")
    cut = pb.truncated(item, attached, texts)
    if item.heard:
        assert cut is None
        return
    assert cut is not None
    assert cut.text == item.heard_text
    assert (cut.played_ms, cut.unheard_ms) == (item.played_ms, item.unheard_ms)
    for delivery_id in attached:
        text = texts.get(delivery_id, "")
        said = bool(text) and text in item.heard_text
        assert (delivery_id in cut.unheard_delivery_ids) is not said


def test_a_closing_whose_words_were_all_heard_is_not_said_again() -> None:
    u = Utterance("r1", "Done. Your table is booked. Anything else?", 0, 4000)
    item = Settled(u, heard=False, played_ms=3000, reason="barge_in")
    cut = pb.truncated(item, ("d1", "d2"), {"d1": "Your table is booked.", "d2": "Anything else?"})
    assert cut is not None
    assert cut.unheard_delivery_ids == ("d2",)


def test_a_reply_composed_during_a_barge_in_is_cancelled_and_kept_empty() -> None:
    assert pb.unsaid() == (
        ResponseCancel(reason="barge_in"), ReplyTruncated(text="", played_ms=0, unheard_ms=0)
    )


# ---------------------------------------------------------------------- sending


@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_queued_utterance_is_dropped_for_the_first_reason_that_holds(
    closed: bool, cut: bool, interrupt: bool, is_delivery: bool, speaking: bool
) -> None:
    reason = pb.abandon_reason(
        closed=closed, cut_while_queued=cut, interrupt=interrupt,
        is_delivery=is_delivery, caller_speaking=speaking,
    )
    if closed:
        assert reason == "call_ended"
    elif cut:
        assert reason == "barge_in"
    elif is_delivery and speaking and not interrupt:
        assert reason == "user_speaking"
    else:
        assert reason is None


def test_only_an_urgent_closing_talks_over_a_caller() -> None:
    def reason(*, interrupt: bool, is_delivery: bool) -> str | None:
        return pb.abandon_reason(
            closed=False, cut_while_queued=False, interrupt=interrupt,
            is_delivery=is_delivery, caller_speaking=True,
        )

    assert reason(interrupt=False, is_delivery=True) == "user_speaking"
    assert reason(interrupt=True, is_delivery=True) is None
    # A reply answers the caller's own turn: it is not dropped for their speaking.
    assert reason(interrupt=False, is_delivery=False) is None


@given(st.integers(-10, 1000), st.integers(0, 5000))
def test_paced_sending_keeps_at_most_the_lead_queued(lead: int, queued: int) -> None:
    delay = pb.pace_delay_ms(lead, queued)
    assert delay >= 0
    if lead <= 0:
        assert delay == 0
    else:
        # After waiting, what is still queued is exactly the lead (or less, sent at once).
        assert queued - delay == min(queued, lead)


# ---------------------------------------------------------------------- floor and doubt


FLOORS = st.builds(
    tt.Floor, playing=st.booleans(), flowing=st.booleans(), replying=st.booleans(),
    verdict_pending=st.booleans(), recognizing=st.booleans(),
)


@given(FLOORS)
def test_each_vad_verdict_goes_to_its_rule(floor: tt.Floor) -> None:
    assert tt.on_vad("suspected", floor) == tt.on_suspected(
        playing=floor.playing, flowing=floor.flowing
    )
    assert tt.on_vad("rejected", floor) == tt.on_rejected(flowing=floor.flowing)
    assert tt.on_vad("started", floor) == tt.on_started(
        playing=floor.playing, replying=floor.replying,
        verdict_pending=floor.verdict_pending, recognizing=floor.recognizing,
    )
    assert tt.on_vad("stopped", floor) == []


def test_a_yes_runs_the_doubtful_request_once_and_a_no_says_nothing_was_done() -> None:
    assert tt.answer_doubt("book two", True, connection_id="call_C", answered=3) == [
        tt.RunTurn("book two", "heard-call_C-3")
    ]
    assert tt.answer_doubt("book two", False, connection_id="call_C", answered=4) == [
        tt.SayLine(tt.NOT_DONE, "line-call_C-4")
    ]
    assert tt.answer_doubt(None, True, connection_id="call_C", answered=4) == []


@given(
    st.text(alphabet="0123456789*", max_size=4), st.sampled_from(list("0123456789*#")),
    st.booleans(),
)
def test_the_view_is_asked_about_a_confirmation_only_when_it_changes_the_key(
    entry: str, digit: str, doubt_pending: bool
) -> None:
    asked = dtmf.may_confirm(entry, digit, doubt_pending=doubt_pending)
    with_yes = dtmf.press(entry, digit, doubt_pending=doubt_pending, awaiting_confirmation=True)
    without = dtmf.press(entry, digit, doubt_pending=doubt_pending, awaiting_confirmation=False)
    if not asked:
        assert with_yes == without
    else:
        assert with_yes != without


def test_key_press_turns_have_stable_ids() -> None:
    assert dtmf.turn_id("call_C", 2) == "dtmf-call_C-2"
