"""The surface view's record of a turn's own reply, which answers a repeated client turn id."""

from __future__ import annotations

import pytest

from libs.bus import Context
from libs.events import SessionOpened, TurnReceived, TurnReplied
from services.interaction_surface.core.view import SurfaceView
from testkit.events import envelope

pytestmark = pytest.mark.fast


def test_a_closing_said_under_the_turn_that_opened_its_batch_keeps_the_turns_own_reply() -> None:
    view = SurfaceView()
    events = [
        envelope(SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h")),
        envelope(TurnReceived(channel="chat", text="give me x", client_turn_id="c1"),
                 turn_id="t1"),
        envelope(TurnReplied(text="I'm on it: x."), turn_id="t1", response_id="r1"),
        # The batch's closing, written later as a message under the same turn.
        envelope(TurnReplied(text="All done: x."), turn_id="t1", delivery_id="d1"),
    ]
    for seq, env in enumerate(events, start=1):
        view.apply(Context.INTERACTION, env, seq)
    found = view.log("s1")
    assert found is not None
    assert found.client_turns == {"c1": "t1"}
    reply = found.replies["t1"]
    assert reply.response_id == "r1"
    assert reply.event.text == "I'm on it: x."
    assert found.open_turn is None
