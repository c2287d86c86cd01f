"""The doubt's hand-offs to its call: an answer, spoken or keyed, starts what it decides, and a
question an earlier call left unanswered is held again and asked again (`Doubt.on_answer`,
`Doubt.ask_again`; the call only delegates to them)."""

from __future__ import annotations

from typing import Any

from libs.domain import PendingHearing
from libs.events import HearingSettled
from services.interaction_surface.voice import turn_taking as tt
from services.interaction_surface.voice.doubt import Doubt
from services.interaction_surface.voice.floor import FloorConfig, Word

HEARD = [Word("give", 0.9), Word("me", 0.9), Word("access", 0.9), Word("to", 0.9),
         Word("gitlub", 0.3)]
CALLS = [("provision_access", {"accesses": ["gitlub"]})]


def _doubt() -> tuple[Doubt, list[Any], list[tt.RunTurn | tt.SayLine]]:
    recorded: list[Any] = []
    started: list[tt.RunTurn | tt.SayLine] = []
    doubt = Doubt("call_1", None, FloorConfig(),
                  record=lambda event, **ids: recorded.append(event), start=started.append)
    return doubt, recorded, started


def test_a_yes_starts_the_held_request_as_a_turn_once() -> None:
    doubt, recorded, started = _doubt()
    doubt.reviewer("give me access to gitlub", HEARD)(CALLS)
    doubt.asked()
    doubt.on_answer(True)
    assert started == [tt.RunTurn("give me access to gitlub", "heard-call_1-1")]
    assert recorded[-1] == HearingSettled(answer="yes")
    # Nothing held any more: a second yes starts nothing.
    doubt.on_answer(True)
    assert len(started) == 1


def test_a_no_starts_the_line_that_nothing_was_done() -> None:
    doubt, _recorded, started = _doubt()
    doubt.reviewer("give me access to gitlub", HEARD)(CALLS)
    doubt.on_answer(False)
    assert started == [tt.SayLine(tt.NOT_DONE, "line-call_1-1")]


def test_a_pending_question_is_held_again_and_asked_again() -> None:
    doubt, recorded, started = _doubt()
    doubt.ask_again(PendingHearing("give me access to gitlub", "Did you say gitlub?"))
    assert started == [tt.SayLine("Did you say gitlub?", "line-call_1-again")]
    assert doubt.pending()
    # Held as recorded: its answer ends it with an event.
    doubt.on_answer(True)
    assert recorded == [HearingSettled(answer="yes")]
    assert started[-1] == tt.RunTurn("give me access to gitlub", "heard-call_1-1")


def test_no_pending_question_asks_nothing() -> None:
    doubt, recorded, started = _doubt()
    doubt.ask_again(None)
    doubt.ask_again(PendingHearing("give me access to gitlub", ""))
    assert started == []
    assert recorded == []
    assert not doubt.pending()
