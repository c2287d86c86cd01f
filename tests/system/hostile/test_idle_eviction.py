"""Memory: an idle session leaves the surface's memory, and the next request for it is
answered from the streams with the same history (snapshot, timeline, cursor), and the
session goes on."""

from __future__ import annotations

from typing import Any

import httpx

from testkit.surface import SurfaceStack, effects, eventually, open_chat, unique


def _without_cursors(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "cursor"} for e in events]


async def test_an_idle_session_is_evicted_and_read_back_with_the_same_history(
    stack: SurfaceStack,
) -> None:
    log = stack.logs / "interaction_surface.log"
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        chat = await open_chat(client)
        await chat.say("my name is zoe, hello")
        resource = unique("wiki")
        await chat.say(f"give me access to {resource}")

        async def settled() -> bool:
            snapshot = await chat.snapshot()
            ops = snapshot["operations"]
            deliveries = snapshot.get("deliveries", [])
            return bool(ops) and all(o["status"] == "committed" for o in ops) and all(
                d["status"] in ("delivered", "spoken", "suppressed", "superseded")
                for d in deliveries
            )

        await eventually(settled, timeout_s=30)
        before = (await chat.snapshot(), await chat.timeline())

        async def evicted() -> bool:
            return any(
                "evicted" in line and chat.session_id in line
                for line in log.read_text().splitlines()
            )

        # Idle for HOLDLINE_SESSION_IDLE_S (2 s) with nothing running: evicted.
        await eventually(evicted, timeout_s=20, every_s=0.5)
        after = (await chat.snapshot(), await chat.timeline())
        # The same state and cursor, and the same events in the same order. (An event's own
        # cursor counts the other streams' events folded before it, which a restore folds in
        # the order they happened rather than the order they arrived in.)
        assert after[0] == before[0]
        assert _without_cursors(after[1]) == _without_cursors(before[1])
        # It goes on from where it was.
        answer = await chat.say("thanks, that is all")
        assert answer["reply"]["text"]
        assert len(await chat.timeline()) > len(before[1])
        assert await effects(stack, resource) == 1
