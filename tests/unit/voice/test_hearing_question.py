"""A "did you say ...?" is an event of the session: recorded once when asked, ended when
answered or replaced, and asked again by the session's next call while it is pending."""

from __future__ import annotations

from typing import Any

from libs.domain import PendingHearing, session
from libs.events import HearingAsked, HearingSettled, SessionOpened
from services.interaction_surface.voice import turn_taking as tt
from services.interaction_surface.voice.doubt import Doubt
from services.interaction_surface.voice.floor import FloorConfig, Word
from testkit.events import envelope

HEARD = [Word("give", 0.9), Word("me", 0.9), Word("access", 0.9), Word("to", 0.9),
         Word("gitlub", 0.3)]
CALLS = [("provision_access", {"accesses": ["gitlub"]})]


def _doubt() -> tuple[Doubt, list[tuple[Any, dict[str, Any]]]]:
    recorded: list[tuple[Any, dict[str, Any]]] = []
    doubt = Doubt("call_1", None, FloorConfig(),
                  record=lambda event, **ids: recorded.append((event, ids)))
    return doubt, recorded


def test_a_question_is_recorded_once_with_its_request_and_ended_by_the_answer() -> None:
    doubt, recorded = _doubt()
    question = doubt.reviewer("give me access to gitlub", HEARD)(CALLS)
    assert question is not None
    assert question.startswith("Did you say gitlub?")
    doubt.asked(turn_id="t1", response_id="r1")
    doubt.asked(turn_id="t1", response_id="r1")
    assert recorded == [(
        HearingAsked(text="give me access to gitlub", question=question, connection_id="call_1"),
        {"turn_id": "t1", "response_id": "r1"},
    )]
    actions = doubt.answer(yes=True)
    assert actions == [tt.RunTurn("give me access to gitlub", "heard-call_1-1")]
    assert recorded[-1] == (HearingSettled(answer="yes"), {})
    assert not doubt.pending()


def test_a_question_never_recorded_ends_without_an_event() -> None:
    doubt, recorded = _doubt()
    doubt.reviewer("give me access to gitlub", HEARD)(CALLS)
    # The turn was cut before its question was said: nothing to settle.
    doubt.drop()
    assert recorded == []
    assert not doubt.pending()


def test_a_new_request_replaces_a_recorded_question() -> None:
    doubt, recorded = _doubt()
    doubt.reviewer("give me access to gitlub", HEARD)(CALLS)
    doubt.asked()
    doubt.drop()
    assert recorded[-1] == (HearingSettled(answer="replaced"), {})


def test_a_restored_question_is_answered_on_the_new_call() -> None:
    doubt, recorded = _doubt()
    doubt.restore(PendingHearing("give me access to gitlub", "Did you say gitlub?"))
    assert doubt.pending()
    actions = doubt.answer(yes=False)
    assert actions == [tt.SayLine(tt.NOT_DONE, "line-call_1-1")]
    assert recorded == [(HearingSettled(answer="no"), {})]


def test_a_call_asks_again_only_a_pending_question() -> None:
    assert tt.ask_again(None, connection_id="call_2") == []
    assert tt.ask_again("", connection_id="call_2") == []
    assert tt.ask_again("Did you say gitlub?", connection_id="call_2") == [
        tt.SayLine("Did you say gitlub?", "line-call_2-again")
    ]


def test_the_session_keeps_the_question_pending_until_it_is_settled() -> None:
    state = session.evolve(None, envelope(
        SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h")))
    assert state.pending_hearing is None
    asked = HearingAsked(text="give me access to gitlub", question="Did you say gitlub?",
                         connection_id="call_1")
    state = session.evolve(state, envelope(asked))
    assert state.pending_hearing == PendingHearing(asked.text, asked.question)
    for answer in ("yes", "no", "replaced"):
        settled = envelope(HearingSettled(answer=answer))
        assert session.evolve(state, settled).pending_hearing is None
