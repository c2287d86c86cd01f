"""A running handler's heartbeat: `in_progress` while it works, so its ack wait stays short."""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.msg import Msg


class Heartbeat:
    """`in_progress` every `every_s` while a handler runs, on a loop timer.

    Most handlers finish well inside the first interval: a timer handle per message costs
    far less than a task per message, and a task is made only when a beat is due.
    """

    __slots__ = ("_every_s", "_handle", "_loop", "_msg", "_task")

    def __init__(self, msg: Msg, every_s: float) -> None:
        self._msg = msg
        self._every_s = every_s
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(every_s, self._beat)

    def _beat(self) -> None:
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._send())
        self._handle = self._loop.call_later(self._every_s, self._beat)

    async def _send(self) -> None:
        with contextlib.suppress(Exception):
            await self._msg.in_progress()

    def cancel(self) -> None:
        """Stop beating: the handler is done, so no beat may follow its ack."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._task is not None:
            self._task.cancel()
