"""One standing pull request per consumer instead of two requests per delivery wave.

nats-py's `fetch` asks twice for every wave of messages (a `no_wait` probe answered by a
404, then a lingering request) and returns after the first few, so a consumer that receives
events one or two at a time pays ~3 broker messages of overhead per event it handles. Here
a consumer keeps one request for up to `batch` messages open for `expires_s`, with idle
heartbeats: the broker pushes messages as they are stored and the client asks again only
when that request is used up, ends (a 408/409 status) or the connection was re-established.

Messages are taken where the client's parser reads them (`BusClient.deliver_directly`) and
handed to `on_message` at once: no per-subscription queue, no task woken to read it, no
`wait_for` per read (`bench.delivery` measures what a delivery costs;
`docs/journal/2026-12-06-delivery-taken-where-the-parser-reads-it.md`).

The request never asks for more than the room the caller names, so the consumer's bound on
messages in hand is kept, up to one request's worth.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from typing import Protocol

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from .client import BusClient

_STATUS = "Status"
_HEARTBEAT = "100"
_EXPIRED = "408"
_RETRY_PAUSE_S = 0.2


class Pull(Protocol):
    """How a consumer takes its messages: `wait` hands them to `on_message` as they come."""

    def close(self) -> None:
        """Stop taking this subscription's messages (before it is unsubscribed)."""
        ...

    def interrupt(self) -> None:
        """End the current `wait` now (the consumer is stopping)."""
        ...

    async def wait(self, room: int, timeout_s: float) -> bool:
        """Take up to `room` messages for at most `timeout_s`; whether the broker was heard."""
        ...


class StandingPull:
    """Serves a bound pull subscription through one open pull request at a time."""

    def __init__(
        self,
        client: BusClient,
        sub: JetStreamContext.PullSubscription,
        *,
        batch: int,
        expires_s: float,
        heartbeat_s: float,
        reconnects: Callable[[], int],
        on_message: Callable[[Msg], None],
    ) -> None:
        self._client = client
        self._sub = sub
        self._sid = sub._sub._id
        self._batch = batch
        self._expires_s = expires_s
        self._heartbeat_s = heartbeat_s
        self._reconnects = reconnects
        self._seen_reconnects = reconnects()
        self._on_message = on_message
        # Messages the open request may still deliver, and when the broker drops it.
        self._outstanding = 0
        self._ends_at = 0.0
        # After a refusal (no responders, leadership change), not before this time.
        self._retry_at = 0.0
        # Whether a message or a heartbeat came since `wait` last returned.
        self._heard = False
        # Resolved when the open request is used up or ended: time to ask again.
        self._over: asyncio.Future[None] | None = None
        client.deliver_directly(self._sid, self._arrived)

    def close(self) -> None:
        """Stop taking this subscription's messages (before it is unsubscribed)."""
        self._client.stop_delivering(self._sid)
        self._wake()

    def interrupt(self) -> None:
        """End the current `wait` now (the consumer is stopping)."""
        self._wake()

    async def _request(self, room: int) -> None:
        wanted = max(1, min(self._batch, room))
        body = {
            "batch": wanted,
            "expires": int(self._expires_s * 1e9),
            "idle_heartbeat": int(self._heartbeat_s * 1e9),
        }
        sub = self._sub
        await self._client.publish(sub._nms, json.dumps(body).encode(), sub._deliver)
        self._outstanding = wanted
        # A little before the broker's own expiry, so no gap opens between two requests.
        self._ends_at = time.monotonic() + self._expires_s * 0.9

    def _arrived(self, msg: Msg) -> None:
        status = msg.headers.get(_STATUS) if msg.headers else None
        if status is None:
            self._heard = True
            self._outstanding -= 1
            if self._outstanding <= 0:
                self._wake()
            self._on_message(msg)
        elif status == _HEARTBEAT:
            self._heard = True
        else:
            # 408 (expired), 409 (leadership change, consumer deleted), 503 (no
            # responders): the request is over and the next wait asks again, after a
            # pause unless it merely expired. Only messages and heartbeats count as
            # hearing the broker, so a consumer the broker lost is still noticed.
            self._outstanding = 0
            if status != _EXPIRED:
                self._retry_at = time.monotonic() + _RETRY_PAUSE_S
            self._wake()

    def _wake(self) -> None:
        over = self._over
        if over is not None and not over.done():
            over.set_result(None)

    async def wait(self, room: int, timeout_s: float) -> bool:
        """Keep a request open while messages go to `on_message`; return when it is used
        up or ended, or after `timeout_s`, saying whether the broker was heard meanwhile
        (a message or a heartbeat)."""
        if self._reconnects() != self._seen_reconnects:
            # A reconnect loses the broker's copy of the request: ask again at once.
            self._seen_reconnects = self._reconnects()
            self._outstanding = 0
        if self._outstanding <= 0 or time.monotonic() >= self._ends_at:
            pause = self._retry_at - time.monotonic()
            if pause > 0:
                await asyncio.sleep(min(pause, timeout_s))
                return self._take_heard()
            await self._request(room)
        loop = asyncio.get_running_loop()
        self._over = over = loop.create_future()
        # Not after the request's own end, so the next one is asked for in time.
        left = min(timeout_s, max(self._ends_at - time.monotonic(), 0.0))
        timer = loop.call_later(left, self._wake)
        try:
            await over
        finally:
            timer.cancel()
            self._over = None
        return self._take_heard()

    def _take_heard(self) -> bool:
        heard, self._heard = self._heard, False
        return heard


class FetchingPull:
    """Serves a bound pull subscription through nats-py's own `fetch` (the "plain" bus mode:
    its public API only; two requests per wave, and a task hop per message)."""

    def __init__(
        self,
        sub: JetStreamContext.PullSubscription,
        *,
        batch: int,
        on_message: Callable[[Msg], None],
    ) -> None:
        self._sub = sub
        self._batch = batch
        self._on_message = on_message
        self._over: asyncio.Future[None] | None = None

    def close(self) -> None:
        """Nothing is delivered outside `wait`: end any wait in progress."""
        self.interrupt()

    def interrupt(self) -> None:
        """End the current `wait` now (the consumer is stopping)."""
        over = self._over
        if over is not None and not over.done():
            over.set_result(None)

    async def wait(self, room: int, timeout_s: float) -> bool:
        """Fetch up to `room` messages (at most a batch), waiting up to `timeout_s`; whether
        any came. An interrupted fetch is abandoned: what it had taken is redelivered."""
        loop = asyncio.get_running_loop()
        self._over = over = loop.create_future()
        fetch = asyncio.ensure_future(
            self._sub.fetch(max(1, min(self._batch, room)), timeout=timeout_s)
        )
        try:
            await asyncio.wait({fetch, over}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._over = None
        if not fetch.done():
            fetch.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fetch
            return False
        try:
            msgs = fetch.result()
        except nats.errors.TimeoutError:
            return False
        for msg in msgs:
            self._on_message(msg)
        return bool(msgs)
