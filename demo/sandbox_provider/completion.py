"""Async completion: a pending record commits when its delay is up, once, even across a
restart (the pending records are rescheduled at start), unless it was cancelled first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from .callbacks import CallbackSender
from .idempotency import ledger_key
from .metrics import Metrics
from .records import Record, commit_pending, iso_at
from .store import Store

log = logging.getLogger("holdline.sandbox_provider.completion")

# A failed async commit (database trouble) is retried after this pause.
_COMMIT_RETRY_S = 1.0


class PendingCommits:
    """The tasks that commit pending records when they are due."""

    def __init__(
        self,
        store: Store,
        callbacks: CallbackSender,
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._callbacks = callbacks
        self._metrics = metrics
        self._clock = clock
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        """Schedule every record still pending in the store (a restart resumes them)."""
        for record in self._store.pending_records():
            self.schedule(record)

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def schedule(self, record: Record) -> None:
        """Commit ``record`` when its ``commit_due`` is reached."""
        task = asyncio.create_task(self._commit_later(record), name=f"commit-{record.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _commit_later(self, record: Record) -> None:
        due = record.commit_due if record.commit_due is not None else self._clock()
        await asyncio.sleep(max(0.0, due - self._clock()))
        while True:
            try:
                self._commit_pending(record.id)
            except Exception:
                log.exception("async commit of %s failed; retrying", record.id)
                await asyncio.sleep(_COMMIT_RETRY_S)
            else:
                return

    def _commit_pending(self, record_id: str) -> None:
        # No await inside: the event loop cannot interleave another commit or a cancel.
        now = self._clock()
        with self._store.transaction():
            current = self._store.get_record(record_id)
            committed = None if current is None else commit_pending(current, iso_at(now))
            if committed is None:
                return  # cancelled or revoked before it committed: no effect
            self._store.update_record(committed)
            duplicates = self._store.add_effects(
                committed.kind,
                ledger_key(committed.idempotency_key, committed.reference, committed.id),
                committed.resource,
                1,
            )
            queued = self._callbacks.enqueue(committed, now) is not None
        self._metrics.effects.labels(committed.kind).inc()
        if duplicates:
            self._metrics.duplicate_effects.labels(committed.kind).inc(duplicates)
        if queued:
            self._callbacks.wake()
