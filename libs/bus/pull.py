"""One standing pull request per consumer instead of two requests per delivery wave.

nats-py's `fetch` asks twice for every wave of messages (a `no_wait` probe answered by a
404, then a lingering request) and returns after the first few, so a consumer that receives
events one or two at a time pays ~3 broker messages of overhead per event it handles. Here
a consumer keeps one request for up to `batch` messages open for `expires_s`, with idle
heartbeats: the broker pushes messages as they are stored and the client asks again only
when that request is used up, ends (a 408/409 status) or the connection was re-established.

The request never asks for more than the room the caller names, so the consumer's bound on
messages in hand is kept, up to one request's worth.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js import JetStreamContext

_STATUS = "Status"
_HEARTBEAT = "100"
_EXPIRED = "408"
_RETRY_PAUSE_S = 0.2


class StandingPull:
    """Reads a bound pull subscription through one open pull request at a time."""

    def __init__(
        self,
        sub: JetStreamContext.PullSubscription,
        *,
        batch: int,
        expires_s: float,
        heartbeat_s: float,
        reconnects: Callable[[], int],
    ) -> None:
        self._sub = sub
        self._batch = batch
        self._expires_s = expires_s
        self._heartbeat_s = heartbeat_s
        self._reconnects = reconnects
        self._seen_reconnects = reconnects()
        # Messages the open request may still deliver, and when the broker drops it.
        self._outstanding = 0
        self._ends_at = 0.0
        # After a refusal (no responders, leadership change), not before this time.
        self._retry_at = 0.0

    async def _request(self, room: int) -> None:
        wanted = max(1, min(self._batch, room))
        body = {
            "batch": wanted,
            "expires": int(self._expires_s * 1e9),
            "idle_heartbeat": int(self._heartbeat_s * 1e9),
        }
        sub = self._sub
        await sub._nc.publish(sub._nms, json.dumps(body).encode(), sub._deliver)
        self._outstanding = wanted
        # A little before the broker's own expiry, so no gap opens between two requests.
        self._ends_at = time.monotonic() + self._expires_s * 0.9

    async def next(self, room: int, timeout_s: float) -> tuple[list[Msg], bool]:
        """Messages delivered within `timeout_s` (all that are there once one is), and
        whether the broker was heard at all (a message or a heartbeat)."""
        if self._reconnects() != self._seen_reconnects:
            # A reconnect loses the broker's copy of the request: ask again at once.
            self._seen_reconnects = self._reconnects()
            self._outstanding = 0
        if self._outstanding <= 0 or time.monotonic() >= self._ends_at:
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, timeout_s))
                return [], False
            await self._request(room)
        # nats-py has no continuous pull: its own fetch reads this subscription the same way.
        inner = self._sub._sub
        queue = inner._pending_queue
        msgs: list[Msg] = []
        heard = False
        deadline = time.monotonic() + timeout_s
        while True:
            if queue.empty():
                if msgs:
                    return msgs, True
                left = deadline - time.monotonic()
                if left <= 0:
                    return msgs, heard
                try:
                    msg = await asyncio.wait_for(queue.get(), left)
                except TimeoutError:
                    return msgs, heard
            else:
                msg = queue.get_nowait()
            inner._pending_size -= len(msg.data)
            status = msg.headers.get(_STATUS) if msg.headers else None
            if status is None:
                heard = True
                msgs.append(msg)
                self._outstanding -= 1
            elif status == _HEARTBEAT:
                heard = True
            else:
                # 408 (expired), 409 (leadership change, consumer deleted), 503 (no
                # responders): the request is over and the next call asks again, after a
                # pause unless it merely expired. Only messages and heartbeats count as
                # hearing the broker, so a consumer the broker lost is still noticed.
                self._outstanding = 0
                if status != _EXPIRED:
                    self._retry_at = time.monotonic() + _RETRY_PAUSE_S
                if not msgs:
                    return msgs, heard
