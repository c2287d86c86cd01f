"""The surface's per-session locks: one holder at a time, none kept once nobody needs it."""

from __future__ import annotations

import asyncio

from services.interaction_surface.core.session_locks import SessionLocks


async def test_a_caller_arriving_as_the_lock_passes_to_a_waiter_still_queues() -> None:
    locks = SessionLocks()
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    async def work(name: str, hold_s: float) -> None:
        async with locks.hold("s1"):
            inside.append(name)
            overlaps.append(tuple(inside))
            await asyncio.sleep(hold_s)
            inside.remove(name)

    await locks.acquire("s1")
    waiter = asyncio.create_task(work("waiter", 0.02))
    await asyncio.sleep(0)
    # Released with a waiter not yet woken: a caller arriving now must queue behind it.
    locks.release("s1")
    late = asyncio.create_task(work("late", 0.0))
    await asyncio.wait_for(asyncio.gather(waiter, late), 2)
    assert overlaps == [("waiter",), ("late",)]
    assert len(locks) == 0


async def test_a_lock_taken_in_one_task_is_released_in_another() -> None:
    locks = SessionLocks()
    await locks.acquire("s1")
    order: list[str] = []

    async def next_turn() -> None:
        async with locks.hold("s1"):
            order.append("next")

    async def hand_over() -> None:
        order.append("record")
        locks.release("s1")

    queued = asyncio.create_task(next_turn())
    await asyncio.sleep(0)
    await asyncio.create_task(hand_over())
    await asyncio.wait_for(queued, 2)
    assert order == ["record", "next"]
    assert len(locks) == 0


async def test_a_cancelled_waiter_leaves_no_lock_behind() -> None:
    locks = SessionLocks()
    await locks.acquire("s1")
    waiter = asyncio.create_task(locks.acquire("s1"))
    await asyncio.sleep(0)
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    locks.release("s1")
    assert len(locks) == 0
