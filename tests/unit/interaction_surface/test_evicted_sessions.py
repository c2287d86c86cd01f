"""An evicted session's bookkeeping (`core/eviction.EvictedSessions`): events that arrive while
it is out of memory are held and folded after its history, and concurrent callers share one
restore (the broker-backed round trip is tests/component/surface/test_eviction.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from libs.bus import Context
from libs.events import Envelope, SessionOpened, TurnReceived
from services.interaction_surface.core.eviction import EvictedSessions, Held
from testkit.events import envelope

pytestmark = pytest.mark.fast

OPENED = envelope(SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h"))
LATE = envelope(TurnReceived(channel="chat", text="late"), turn_id="t9")


async def test_held_events_are_folded_after_the_history_and_one_restore_serves_all() -> None:
    evicted = EvictedSessions()
    evicted.add("s1")
    assert evicted
    assert "s1" in evicted
    assert "s2" not in evicted
    applied: list[tuple[Context, str, int]] = []
    reads = 0
    gate = asyncio.Event()

    async def history() -> list[Held]:
        nonlocal reads
        reads += 1
        await gate.wait()
        return [(Context.INTERACTION, OPENED, 1)]

    def apply(context: Context, env: Envelope[Any], seq: int) -> None:
        applied.append((context, env.event_id, seq))

    async def restore(session_id: str) -> None:
        await evicted.restore(session_id, history, apply)

    first = asyncio.create_task(restore("s1"))
    await asyncio.sleep(0)
    # A late event while the restore reads: held, and no second restore is started.
    evicted.hold((Context.INTERACTION, LATE, 2), restore)
    second = asyncio.create_task(restore("s1"))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert reads == 1
    assert applied == [
        (Context.INTERACTION, OPENED.event_id, 1), (Context.INTERACTION, LATE.event_id, 2)
    ]
    assert not evicted
    assert "s1" not in evicted
    # In memory again: a restore is a no-op.
    await evicted.restore("s1", history, apply)
    assert reads == 1


async def test_an_event_of_an_evicted_session_starts_its_restore() -> None:
    evicted = EvictedSessions()
    evicted.add("s1")
    restored: list[str] = []
    done = asyncio.Event()

    async def restore(session_id: str) -> None:
        restored.append(session_id)
        done.set()

    evicted.hold((Context.INTERACTION, LATE, 2), restore)
    await asyncio.wait_for(done.wait(), 5)
    assert restored == ["s1"]


def test_without_a_running_loop_an_event_is_held_for_a_restore_on_demand() -> None:
    evicted = EvictedSessions()
    evicted.add("s1")
    called: list[str] = []

    async def restore(session_id: str) -> None:  # pragma: no cover - never started
        called.append(session_id)

    evicted.hold((Context.INTERACTION, LATE, 2), restore)
    assert called == []
    applied: list[int] = []

    async def history() -> list[Held]:
        return []

    asyncio.run(evicted.restore("s1", history, lambda _c, _e, seq: applied.append(seq)))
    assert applied == [2]
