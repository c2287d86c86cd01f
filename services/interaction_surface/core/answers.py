"""Stored answers of the Agent API's repeatable requests (a `tool_call_id`): create-once
claims in the `turns` bucket, written `pending` first and the answer after it has been
returned. (A chat turn's `client_turn_id` needs no claim: its session log answers a
repeat, see `chat/turns.py`.)

Two rules: what a repeat does with a claim it finds (`claim_verdict`), and that the answer
is written behind the response (`WriteBehind`, which also writes a chat turn's record, see
`chat/turns.py`), so a repeat in between waits on the pending claim and a stopping surface
flushes the writes before the bus closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Mapping
from typing import Any, Literal

log = logging.getLogger(__name__)


def claim_verdict(
    stored: Mapping[str, Any] | None, now: float, timeout_s: float
) -> Literal["answered", "take", "wait"]:
    """What a repeated request does with the claim it found (None: none left).

    A claim pending for longer than a turn may stay open was left by a surface that died
    before storing its answer; one without a time (written before claims had one) is waited
    for, as then.
    """
    if stored is None:
        return "take"
    if stored.get("state") == "answered":
        return "answered"
    age = now - float(stored.get("at", now))
    return "take" if age >= timeout_s else "wait"


class WriteBehind:
    """Answer writes that run after the response; `flush` waits for those still running."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._running: set[asyncio.Task[None]] = set()

    def start(self, write: Awaitable[None], name: str) -> asyncio.Task[None]:
        """Run `write` in the background; a failure is logged (what it would have recorded
        stays pending: a claim, or a turn left open, each taken over after the turn timeout)."""

        async def run() -> None:
            await write

        task = asyncio.create_task(run(), name=name)
        self._running.add(task)
        task.add_done_callback(self._done)
        return task

    async def flush(self) -> None:
        """Wait for the writes still running (at shutdown, before the bus closes)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Left pending (a claim, an open turn): a repeat takes it over after the timeout.
            log.error("%s not stored: %r", self._what, task.exception())
