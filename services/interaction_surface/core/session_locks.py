"""One asyncio lock per session, kept only while someone holds or waits for it.

Same-process work on a session (its turns, its tool calls, its speaking signals) queues on
its lock instead of racing on the log. A released lock reads unlocked before its next waiter
wakes, so dropping it on `locked()` alone would let a third caller create a second lock and
run beside the waiter; the count of holders and waiters decides instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class SessionLocks:
    """Per-session locks; `hold` for a block, `acquire`/`release` to pass one to a task."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    async def acquire(self, session_id: str) -> None:
        """Wait for the session's lock and take it."""
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        self._users[session_id] = self._users.get(session_id, 0) + 1
        try:
            await lock.acquire()
        except BaseException:
            self._leave(session_id)
            raise

    def release(self, session_id: str) -> None:
        """Give the session's lock back (taken by `acquire`, here or in another task)."""
        self._locks[session_id].release()
        self._leave(session_id)

    @contextlib.asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """The session's lock for the block."""
        await self.acquire(session_id)
        try:
            yield
        finally:
            self.release(session_id)

    def __len__(self) -> int:
        return len(self._locks)

    def _leave(self, session_id: str) -> None:
        users = self._users.get(session_id, 0) - 1
        if users > 0:
            self._users[session_id] = users
            return
        self._users.pop(session_id, None)
        self._locks.pop(session_id, None)
