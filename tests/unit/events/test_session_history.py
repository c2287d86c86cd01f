"""The session's history keeps only heard words, and names a closing only while it holds it."""

from __future__ import annotations

from functools import reduce
from typing import Any

from libs.domain import session
from libs.events import ReplyTruncated, SessionOpened, TurnReceived, TurnReplied
from testkit.events import envelope


def _history(*events: tuple[Any, dict[str, str]]) -> list[tuple[str, str | None]]:
    opened = envelope(SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h"))
    state = reduce(
        lambda s, item: session.evolve(s, envelope(item[0], **item[1])),
        events,
        session.evolve(None, opened),
    )
    return [(m.text, m.delivery_id) for m in state.messages if m.role == "assistant"]


CLOSING = "All done: notion and gitlab."
REPLY = f"Before that: {CLOSING} Sure, take your time."
# A proactive closing said earlier, on the same turn: a cut of the reply must not touch it.
EARLIER = (TurnReplied(text="All done: jira."), {"turn_id": "t1", "delivery_id": "d0"})
CARRYING = (TurnReplied(text=REPLY), {"turn_id": "t1", "response_id": "r1", "delivery_id": "d1"})
ASKED = (TurnReceived(text="wait", channel="voice"), {"turn_id": "t1"})


def test_a_cut_reply_that_carried_a_closing_keeps_only_the_heard_words() -> None:
    cut = ReplyTruncated(text="Before", played_ms=600, unheard_ms=3000,
                         unheard_delivery_ids=("d1",))
    history = _history(ASKED, EARLIER, CARRYING, (cut, {"turn_id": "t1", "response_id": "r1"}))
    # The closing's words were not heard: the message no longer names it.
    assert history == [("All done: jira.", "d0"), ("Before", None)]


def test_a_cut_after_the_closing_keeps_it_named() -> None:
    heard = f"Before that: {CLOSING} Sure,"
    cut = ReplyTruncated(text=heard, played_ms=2500, unheard_ms=900)
    history = _history(ASKED, CARRYING, (cut, {"turn_id": "t1", "response_id": "r1"}))
    assert history == [(heard, "d1")]


def test_nothing_heard_removes_the_reply_only() -> None:
    cut = ReplyTruncated(text="", played_ms=0, unheard_ms=3000, unheard_delivery_ids=("d1",))
    history = _history(ASKED, EARLIER, CARRYING, (cut, {"turn_id": "t1", "response_id": "r1"}))
    assert history == [("All done: jira.", "d0")]
