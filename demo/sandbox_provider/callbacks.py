"""Async completion sender: a durable outbox in SQLite drained by one background task.

A callback is written to the outbox in the same transaction as the state change it
reports, so a crash between commit and delivery only delays it. Failed deliveries are
retried with exponential backoff up to ``callback_max_attempts``, then given up and
logged; nothing here can take the service down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid

import httpx

from libs import tracing
from libs.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign

from .metrics import Metrics
from .records import Record, callback_payload
from .settings import Settings
from .store import OutboxItem, Store

log = logging.getLogger("holdline.sandbox_provider.callbacks")

_MAX_BACKOFF_S = 10.0
# After an unexpected error the loop pauses briefly instead of spinning.
_ERROR_PAUSE_S = 0.5


class CallbackSender:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        metrics: Metrics,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._metrics = metrics
        self._client = client or httpx.AsyncClient(timeout=settings.callback_timeout_s)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def enabled(self) -> bool:
        return self._settings.callback_url is not None

    def enqueue(self, record: Record, now: float) -> str | None:
        """Queue the completion of ``record``; call inside the transaction that changed it.

        Returns the callback id (shared by both copies when the record asked for two).
        """
        if not self.enabled:
            return None
        callback_id = f"cb_{uuid.uuid4().hex}"
        body = json.dumps(callback_payload(callback_id, record), separators=(",", ":")).encode()
        copies = 2 if record.callback_twice else 1
        # The context of the request that caused the completion: the callback continues its trace.
        trace = tracing.current_headers()
        self._store.enqueue_callback(callback_id, record.id, body, copies, now, trace=trace)
        return callback_id

    def wake(self) -> None:
        self._wakeup.set()

    def start(self) -> None:
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._run(), name="sandbox-callbacks")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._client.aclose()

    async def _run(self) -> None:
        while True:
            self._wakeup.clear()
            pause = 0.0
            try:
                for item in self._store.due_callbacks(time.time()):
                    await self._deliver(item)
                next_at = self._store.next_callback_at()
            except Exception:
                log.exception("callback sender loop failed; pausing")
                next_at, pause = None, _ERROR_PAUSE_S
            if pause:
                await asyncio.sleep(pause)
                continue
            timeout = None if next_at is None else max(0.0, next_at - time.time())
            if timeout == 0.0:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout)

    async def _deliver(self, item: OutboxItem) -> None:
        url = self._settings.callback_url
        if url is None:
            return
        attempts = item.attempts + 1
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(self._settings.callback_secret, timestamp, item.body),
            "X-Holdline-Callback-Id": item.callback_id,
            **item.trace,
        }
        error: str | None = None
        try:
            response = await self._client.post(url, content=item.body, headers=headers)
            if not 200 <= response.status_code < 300:
                error = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        if error is None:
            self._store.callback_done(item.seq, attempts)
            self._metrics.callbacks.labels("delivered").inc()
            return
        if attempts >= self._settings.callback_max_attempts:
            self._store.callback_failed(item.seq, attempts, error)
            self._metrics.callbacks.labels("failed").inc()
            log.warning(
                "giving up callback %s (copy %d) for %s after %d attempts: %s",
                item.callback_id,
                item.copy,
                item.record_id,
                attempts,
                error,
            )
            return
        delay = min(_MAX_BACKOFF_S, self._settings.callback_backoff_s * 2 ** (attempts - 1))
        self._store.callback_retry(item.seq, attempts, time.time() + delay, error)
        self._metrics.callbacks.labels("retry").inc()
        log.info("callback %s failed (%s); retry in %.2fs", item.callback_id, error, delay)
