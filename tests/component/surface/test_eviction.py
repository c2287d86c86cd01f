"""Idle sessions leave the surface's view and come back from the real streams with the same
history: snapshot state, timeline and cursor; an event that arrives while a session is
evicted is folded once it is restored."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import msgspec
from nats.js import JetStreamContext

from libs.bus import Topology
from libs.events import INTERACTION, SessionOpened, TurnReceived, TurnReplied
from services.interaction_surface.core.eviction import evict_idle
from services.interaction_surface.core.snapshot import causal_order, timeline_item
from services.interaction_surface.core.view import SurfaceView
from testkit.events import T0, envelope
from testkit.surface import eventually


async def _say(js: JetStreamContext, topology: Topology, sid: str, n: int, event: Any) -> None:
    # Turn k is received at 2k-1 and replied at 2k, each a second after the one before.
    env = envelope(event, session_id=sid, turn_id=f"t{(n + 1) // 2}")
    env = msgspec.structs.replace(env, occurred_at=T0 + timedelta(seconds=n))
    await js.publish(topology.session_subject(sid), INTERACTION.encode(env))


def _history(view: SurfaceView, sid: str) -> tuple[Any, ...]:
    found = view.log(sid)
    assert found is not None
    items = [timeline_item(e) for e in causal_order(found.entries)]
    return (view.session(sid), items, found.cursor)


async def test_an_idle_session_is_evicted_and_restored_with_the_same_history(
    js: JetStreamContext, topology: Topology
) -> None:
    sid, other = "s_evict1", "s_busy1"
    opened = SessionOpened(user_id="ana", tenant_id="acme", agent="concierge", token_hash="h")
    for session in (sid, other):
        await _say(js, topology, session, 0, opened)
    for n in range(1, 7, 2):
        await _say(js, topology, sid, n, TurnReceived(channel="chat", text=f"zebra {n}"))
        await _say(js, topology, sid, n + 1, TurnReplied(text=f"reply {n}"))
    view = SurfaceView()
    await view.follow(js, topology)
    try:
        await asyncio.wait_for(view.caught_up.wait(), 10)
        before = _history(view, sid)
        assert len(before[1]) == 7
        # The busy session was asked for a moment ago; the other one has been idle.
        view.logs[sid].touched = time.monotonic() - 120
        assert evict_idle(view, idle_s=60) == 1
        assert view.log(sid) is None
        assert view.session(sid) is None
        assert sid in view.evicted
        assert view.log(other) is not None

        await view.restore(sid)
        assert sid not in view.evicted
        assert _history(view, sid) == before

        # Evicted again; a late event restores it by itself, and is folded after its history.
        view.logs[sid].touched = time.monotonic() - 120
        assert evict_idle(view, idle_s=60) == 1
        await _say(js, topology, sid, 9, TurnReceived(channel="chat", text="late"))

        async def restored() -> bool:
            found = view.log(sid)
            return found is not None and len(found.entries) == 8

        await eventually(restored, timeout_s=10)
        after = _history(view, sid)
        assert after[1][:7] == before[1]
        assert after[1][7]["type"] == "turn.received"
    finally:
        await view.close()
