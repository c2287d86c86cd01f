"""Who runs an operation: one run per operation in this worker, one worker per operation
(its lease), and a free slot for a tool with a running limit."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from nats.js.kv import KeyValue

from libs.clock import Clock
from libs.domain import OpStatus
from libs.service import Runtime
from libs.tools import ToolRegistry

from .history import Op, OperationHistory
from .lease import Lease, acquire, expires_in
from .settings import Settings

log = logging.getLogger(__name__)


class OperationLeasing:
    """Takes, renews and waits for the leases and slots of the operations this worker runs."""

    def __init__(
        self,
        runtime: Runtime,
        history: OperationHistory,
        registry: ToolRegistry,
        settings: Settings,
        clock: Clock,
    ) -> None:
        # The leases bucket is read from the runtime when used (declared at start-up).
        self._runtime = runtime
        self._history = history
        self._registry = registry
        self._settings = settings
        self._clock = clock
        # Per operation id: the lock of the run in hand, and how many runs hold or want it.
        self._in_hand: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, int] = {}

    @property
    def _leases(self) -> KeyValue:
        return self._runtime.bucket("leases")

    @contextlib.asynccontextmanager
    async def one_at_a_time(self, operation_id: str) -> AsyncIterator[bool]:
        """One run per operation in this worker, whichever consumer brought it; yields
        whether another run was in hand first.

        The lease keeps other workers out but lets its own holder in again, and the two
        consumers (operation events, work commands) each order only their own messages.
        """
        lock = self._in_hand.get(operation_id)
        if lock is None:
            lock = self._in_hand[operation_id] = asyncio.Lock()
        queued = lock.locked()
        self._queued[operation_id] = self._queued.get(operation_id, 0) + 1
        try:
            async with lock:
                yield queued
        finally:
            self._queued[operation_id] -= 1
            if self._queued[operation_id] == 0:
                # Nobody else waits on this operation here: forget its lock.
                del self._queued[operation_id]
                del self._in_hand[operation_id]

    async def wait_for_lease(
        self, session_id: str, operation_id: str
    ) -> tuple[Lease | None, bool]:
        """The operation's lease once its holder lets go (None once the operation is
        terminal), and whether another holder had it first.

        Acknowledging this message while another worker holds the lease would lose the work
        if that worker then fails: its own delivery may already be acknowledged.
        """
        owner, ttl = self._settings.worker_id, self._settings.lease_ttl_s
        waited = False
        # Bounded by the holder: it finishes, or stops renewing and the lease expires.
        while (lease := await acquire(self._leases, operation_id, owner, ttl, self._clock)) is None:
            waited = True
            op = await self._history.load(session_id, operation_id)
            if op is None or op.state.terminal:
                return None, waited
            # Wake right at the holder's expiry (a dead worker's operation is taken over
            # then, not up to a poll later); a live holder has renewed it by that time.
            left = await expires_in(self._leases, operation_id, self._clock)
            poll = self._settings.poll_interval_s * 4
            await asyncio.sleep(poll if left is None else min(poll, max(0.02, left + 0.01)))
        return lease, waited

    async def running_slot(self, op: Op) -> Lease | None:
        """For tools with a running limit: wait (queued, admitted) for a free slot."""
        session_id, operation_id = op.state.session_id, op.state.operation_id
        if op.state.terminal:
            return None
        limit = self._registry.tool(op.state.tool).limits.running
        if limit is None:
            return None
        owner, ttl = f"{self._settings.worker_id}/{operation_id}", self._settings.lease_ttl_s
        while True:
            for i in range(limit):
                slot = await acquire(
                    self._leases, f"slot.{op.state.tool}.{i}", owner, ttl, self._clock
                )
                if slot is not None:
                    return slot
            fresh = await self._history.load(session_id, operation_id)
            if (
                fresh is None
                or fresh.state.terminal
                or fresh.state.status is OpStatus.CANCEL_REQUESTED
            ):
                return None
            if fresh.state.deadline_at is not None and self._clock.now() >= fresh.state.deadline_at:
                return None
            await asyncio.sleep(self._settings.poll_interval_s)

    async def renew(self, leases: list[Lease]) -> None:
        """Heartbeat the held leases until cancelled.

        The lease is short (a dead worker's operation is taken over seconds later), so a
        renewal that fails on a broker hiccup (a reconnect, an election) must not end the
        loop: the next one half a second later keeps the lease, well inside its ttl.
        """
        while True:
            await asyncio.sleep(self._settings.lease_renew_s)
            for lease in leases:
                try:
                    await lease.renew()
                except Exception as exc:  # noqa: BLE001 - keep heartbeating through broker errors
                    log.info("lease renewal failed (%r); trying again", exc)
