"""The floor's and the keypad's decisions without a socket: what was heard, when to cut,
when to resume (pure; the call that carries them out is tested over real audio)."""

from __future__ import annotations

import pytest

from services.interaction_surface.voice import dtmf
from services.interaction_surface.voice import turn_taking as tt
from services.interaction_surface.voice.floor import FloorConfig

GOES_ON = FloorConfig(continue_on_backchannel=True)
STOPS = FloorConfig(continue_on_backchannel=False)


def ended(text: str, **kw: object) -> list[tt.Action]:
    args: dict[str, object] = {
        "suspended": False, "cut_reply": False, "doubt_pending": False, "can_turn": True,
        "floor": GOES_ON,
    }
    args.update(kw)
    return tt.on_ended(text, **args)  # type: ignore[arg-type]


def test_suspected_speech_holds_only_audio_that_is_going_out() -> None:
    assert tt.on_suspected(playing=True, flowing=True) == [tt.Hold()]
    assert tt.on_suspected(playing=False, flowing=True) == []
    assert tt.on_suspected(playing=True, flowing=False) == []


def test_a_rejected_sound_reopens_a_held_line_and_counts_a_false_alarm() -> None:
    assert tt.on_rejected(flowing=False) == [tt.CountFalseAlarm(), tt.Release()]
    assert tt.on_rejected(flowing=True) == []


def test_confirmed_speech_cuts_the_agent_while_it_plays_or_composes() -> None:
    both = {"verdict_pending": False, "recognizing": True}
    assert tt.on_started(playing=True, replying=False, **both) == [
        tt.BargeIn(), tt.Release(), tt.OpenRecognizer(),
    ]
    assert tt.BargeIn() in tt.on_started(playing=False, replying=True, **both)
    assert tt.on_started(playing=False, replying=False, **both) == [
        tt.Release(), tt.OpenRecognizer(),
    ]


def test_more_speech_inside_the_quiet_window_cancels_the_pending_verdict_first() -> None:
    actions = tt.on_started(playing=False, replying=False, verdict_pending=True, recognizing=False)
    assert actions == [tt.CancelVerdict(), tt.Release()]


def test_words_over_a_cut_utterance_make_the_interruption_real() -> None:
    assert ended("cancel my booking", suspended=True) == [
        tt.SettleSuspended("barge_in"), tt.RunTurn("cancel my booking"),
    ]


def test_no_words_over_a_cut_utterance_wait_for_the_quiet_window() -> None:
    assert ended("", suspended=True) == [tt.AwaitFalseInterruption()]


def test_a_backchannel_over_the_agent_resumes_and_is_not_a_turn() -> None:
    assert ended("mm-hmm", suspended=True) == [
        tt.RecordBackchannel("mm-hmm", True), tt.ResumeSuspended(),
    ]
    # Also over a reply still being composed (nothing suspended yet).
    assert ended("uh huh", cut_reply=True)[-1] == tt.ResumeSuspended()


def test_a_backchannel_ends_the_agent_when_the_floor_says_stop() -> None:
    actions = ended("mm-hmm", suspended=True, floor=STOPS)
    assert actions[0] == tt.RecordBackchannel("mm-hmm", False)
    assert tt.ResumeSuspended() not in actions
    assert tt.SettleSuspended("barge_in") in actions


def test_a_backchannel_with_nobody_to_interrupt_is_an_ordinary_turn() -> None:
    assert ended("right") == [tt.RunTurn("right")]


def test_yes_or_no_answers_a_doubt_and_other_words_replace_it() -> None:
    assert ended("yes", doubt_pending=True) == [tt.AnswerDoubt(True)]
    assert ended("no", doubt_pending=True) == [tt.AnswerDoubt(False)]
    assert ended("book room nine", doubt_pending=True) == [
        tt.DropDoubt(), tt.RunTurn("book room nine"),
    ]


def test_words_without_a_turn_port_run_nothing() -> None:
    assert ended("hello", can_turn=False) == []


def test_only_a_call_with_a_recognizer_and_a_window_suspends_and_only_twice() -> None:
    assert tt.resumable("pb1", recognizing=True, false_interruption_ms=600)
    assert not tt.resumable("pb1", recognizing=False, false_interruption_ms=600)
    assert not tt.resumable("pb1", recognizing=True, false_interruption_ms=0)
    assert tt.resumable("pb1.resume1", recognizing=True, false_interruption_ms=600)
    assert not tt.resumable("pb1.resume1.resume2", recognizing=True, false_interruption_ms=600)


def test_a_resume_says_the_rest_from_the_first_unheard_word_under_a_new_mark() -> None:
    plan = tt.plan_resume("your room is booked for nine", "your room is", "pb7")
    assert plan == tt.SayRest("booked for nine", "pb7.resume1")
    again = tt.plan_resume("booked for nine", "booked", "pb7.resume1")
    assert again == tt.SayRest("for nine", "pb7.resume1.resume2")


def test_a_cut_after_the_last_word_resumes_nothing_and_counts_as_heard() -> None:
    assert tt.plan_resume("all done", "all done", "pb2") == tt.HeardAll()


def test_the_cut_utterance_counts_as_played_in_full_only_when_its_rest_was_heard() -> None:
    assert tt.resumed_played_ms(2000, 700, rest_heard=True) == 2000
    assert tt.resumed_played_ms(2000, 700, rest_heard=False) == 700
    assert tt.resumed_played_ms(2000, 2600, rest_heard=False) == 2000


@pytest.mark.parametrize(("digit", "yes"), [("1", True), ("2", False)])
def test_one_and_two_answer_a_doubt_before_a_confirmation(digit: str, yes: bool) -> None:
    entry, action = dtmf.press("", digit, doubt_pending=True, awaiting_confirmation=True)
    assert (entry, action) == ("", dtmf.AnswerDoubt(yes))
    entry, action = dtmf.press("", digit, doubt_pending=False, awaiting_confirmation=True)
    assert (entry, action) == ("", dtmf.Turn("yes" if yes else "no"))


def test_digits_inside_an_entry_are_typed_not_answers() -> None:
    entry, action = dtmf.press("4", "1", doubt_pending=True, awaiting_confirmation=True)
    assert (entry, action) == ("41", dtmf.Collect())
    entry, action = dtmf.press("", "1", doubt_pending=False, awaiting_confirmation=False)
    assert (entry, action) == ("1", dtmf.Collect())


def test_hash_ends_an_entry_and_an_empty_hash_does_nothing() -> None:
    assert dtmf.press("42", "#", doubt_pending=False, awaiting_confirmation=False) == (
        "", dtmf.Turn("42"),
    )
    assert dtmf.press("", "#", doubt_pending=False, awaiting_confirmation=False) == ("", None)


def test_a_pause_ends_an_entry_and_an_entry_keeps_its_last_digits() -> None:
    assert dtmf.pause("123") == ("", dtmf.Turn("123"))
    assert dtmf.pause("") == ("", None)
    entry = ""
    for _ in range(40):
        entry, _action = dtmf.press(entry, "7", doubt_pending=False, awaiting_confirmation=False)
    assert entry == "7" * dtmf.MAX_DIGITS
