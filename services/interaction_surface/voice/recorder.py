"""A call's writes to the bus, in order, off the audio path."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any


class Recorder:
    """Queued writes run one after another by one task: they keep their order, and the audio
    never waits for the bus (a failed write is logged, the next one still runs)."""

    def __init__(self, name: str, log: logging.Logger) -> None:
        self._name = name
        self._log = log
        self._queue: asyncio.Queue[Callable[[], Awaitable[Any]] | None] = asyncio.Queue()
        self._task = asyncio.create_task(self._loop())

    def put(self, make: Callable[[], Awaitable[Any]]) -> None:
        """Queue a write."""
        self._queue.put_nowait(make)

    async def write(self, make: Callable[[], Awaitable[Any]]) -> None:
        """Queue a write and wait until it ran (stored or failed), still in order."""
        ran = asyncio.Event()

        async def run() -> None:
            try:
                await make()
            finally:
                ran.set()

        self.put(run)
        await ran.wait()

    async def _loop(self) -> None:
        while (make := await self._queue.get()) is not None:
            try:
                await make()
            except Exception:  # noqa: BLE001 - a failed write is logged; the next one runs
                self._log.exception("call %s: could not record an event", self._name)

    async def drain(self) -> None:
        """Finish every queued write."""
        self._queue.put_nowait(None)
        await self._task
