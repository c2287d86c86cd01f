"""The agent channel: `delivery.say` in, acknowledgements and signals out, over one WebSocket
that reconnects by itself.

Why it is shaped this way: the server pushes each `delivery.say` under a sequence number and
treats a delivery left unacknowledged by a vanished connection as not said. So the stream
resumes with `after=<last seq seen>`, re-sends every acknowledgement the server had not
confirmed (`delivery.acked`) before anything else, repeats the last signals (the user may
still be talking), and answers a repeated `delivery.say` for a delivery it already
finished with that same acknowledgement instead of handing it to the agent twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from ._closing import AsyncClosing
from .frames import lenient
from .models import AckResult, AckStatus, DeliverySay, HoldlineError, ack_body, signal_body

if TYPE_CHECKING:
    from .http import SessionClient

log = logging.getLogger(__name__)

# Close codes after which reconnecting cannot help: the session is gone or the token wrong,
# or a newer connection of the session replaced this one (the latest wins; fighting back
# would make two agents take the channel from each other forever).
_FATAL_CLOSE = frozenset({4401, 4403, 4404, 4409})
# Acks after which the delivery is finished for the agent.
_FINAL = frozenset({"spoken", "attached"})


class AgentStream(AsyncClosing):
    """`async for say in stream` yields each `DeliverySay` once; `ack`/`signal` report back."""

    def __init__(
        self,
        session: SessionClient,
        *,
        after: int | None = None,
        backoff_s: float = 0.05,
        max_backoff_s: float = 2.0,
        give_up_after_s: float | None = None,
        ack_timeout_s: float = 30.0,
    ) -> None:
        self._session = session
        self.last_seq = after or 0
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._give_up_after_s = give_up_after_s
        self._ack_timeout_s = ack_timeout_s
        self._queue: asyncio.Queue[DeliverySay | BaseException | None] = asyncio.Queue()
        self._ws: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._runner: asyncio.Task[None] | None = None
        self._closing = False
        # Acknowledgements sent and not yet confirmed, in order, and their waiters.
        self._unconfirmed: dict[tuple[str, str], dict[str, Any]] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[AckResult]] = {}
        self._finished: dict[str, dict[str, Any]] = {}
        self._signals: dict[str, bool] = {}
        self._buffered = 0
        self.connections = 0
        self.connection_id: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AgentStream:
        self._runner = asyncio.create_task(self._run())
        waiter = asyncio.ensure_future(self._connected.wait())
        done, _ = await asyncio.wait({waiter, self._runner}, return_when=asyncio.FIRST_COMPLETED)
        if self._runner in done:
            waiter.cancel()
            self._runner.result()
            item = self._queue.get_nowait() if not self._queue.empty() else None
            raise item if isinstance(item, BaseException) else HoldlineError(
                503, "unavailable", "the agent stream could not connect"
            )
        return self

    async def aclose(self) -> None:
        """Close the channel; the server then returns anything unacknowledged to pending."""
        self._closing = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._runner
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(HoldlineError(499, "closed", "the stream was closed"))
        await self._queue.put(None)

    @property
    def connected(self) -> bool:
        """Whether a connection is open right now."""
        return self._connected.is_set()

    @property
    def buffered(self) -> int:
        """Deliveries received and not yet taken by the agent."""
        return self._buffered

    async def wait_connected(self, timeout_s: float = 10.0) -> None:
        """Until a connection is open (after a reconnect, for instance)."""
        await asyncio.wait_for(self._connected.wait(), timeout_s)

    # ------------------------------------------------------------------ agent side

    def __aiter__(self) -> AsyncIterator[DeliverySay]:
        return self

    async def __anext__(self) -> DeliverySay:
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        self._buffered -= 1
        return item

    async def next(self, timeout_s: float) -> DeliverySay:
        """The next delivery.say within `timeout_s` (TimeoutError otherwise)."""
        return await asyncio.wait_for(self.__anext__(), timeout_s)

    async def ack(
        self,
        delivery_id: str,
        status: AckStatus,
        heard_text: str | None = None,
        turn_id: str | None = None,
    ) -> AckResult:
        """Acknowledge and wait until the server recorded it (re-sent across reconnects)."""
        frame = {"type": "delivery.ack", "delivery_id": delivery_id,
                 **ack_body(status, heard_text, turn_id)}
        key = (delivery_id, status)
        future = self._waiters.get(key)
        if future is None or future.done():
            future = asyncio.get_running_loop().create_future()
            self._waiters[key] = future
        self._unconfirmed[key] = frame
        if status in _FINAL:
            self._finished[delivery_id] = frame
        await self._send(frame)
        return await asyncio.wait_for(asyncio.shield(future), self._ack_timeout_s)

    async def signal(
        self, user_speaking: bool | None = None, agent_speaking: bool | None = None
    ) -> None:
        """The user's and the agent's speaking state (repeated after each reconnect)."""
        body = signal_body(user_speaking, agent_speaking)
        self._signals.update(body)
        await self._send({"type": "signal", **body})

    async def _send(self, frame: dict[str, Any]) -> None:
        ws = self._ws
        if ws is None:
            return  # sent on reconnect
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps(frame))

    # ------------------------------------------------------------------ connection

    def _url(self) -> str:
        base = self._session.client.base_url.replace("http://", "ws://", 1).replace(
            "https://", "wss://", 1
        )
        # The token travels in the Authorization header, never in the URL (which ends up in
        # logs; a surface refuses a URL token from a caller that is not local).
        url = f"{base}/v1/sessions/{self._session.session_id}/agent"
        return f"{url}?after={self.last_seq}" if self.last_seq else url

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        delay = self._backoff_s
        down_since: float | None = None
        while not self._closing:
            try:
                async with connect(
                    self._url(), proxy=None, open_timeout=5,
                    additional_headers={"Authorization": f"Bearer {self._session.token}"},
                ) as ws:
                    await self._opened(ws)
                    await self._read(ws)
            except InvalidStatus as exc:
                status = exc.response.status_code
                if 400 <= status < 500 and status != 429:
                    # The request itself is wrong (token, session, `after`): retrying won't help.
                    body = exc.response.body or b""
                    await self._fail(HoldlineError(
                        status, "refused", "agent stream refused", body.decode(errors="replace")
                    ))
                    return
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else 1006
                if code in _FATAL_CLOSE:
                    reason = exc.rcvd.reason if exc.rcvd is not None else ""
                    await self._fail(HoldlineError(code - 4000, "closed", "agent stream", reason))
                    return
            except (OSError, WebSocketException, TimeoutError) as exc:
                log.debug("agent stream: %r; reconnecting", exc)
            finally:
                if self._connected.is_set():
                    # It was up (the server said hello): the next outage starts from scratch.
                    delay = self._backoff_s
                    down_since = None
                self._ws = None
                self._connected.clear()
            if self._stopped():
                return
            now = loop.time()
            down_since = down_since if down_since is not None else now
            if self._give_up_after_s is not None and now - down_since > self._give_up_after_s:
                await self._fail(HoldlineError(503, "unavailable", "holdline is unreachable"))
                return
            await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 - jitter, not crypto
            delay = min(delay * 2, self._max_backoff_s)

    def _stopped(self) -> bool:
        # A method, so a check after an await is not narrowed away by the loop's condition.
        return self._closing

    async def _opened(self, ws: ClientConnection) -> None:
        """Resume: unconfirmed acks first (in order), then the last signals."""
        self._ws = ws
        self.connections += 1
        for frame in list(self._unconfirmed.values()):
            await ws.send(json.dumps(frame))
        if self._signals:
            await ws.send(json.dumps({"type": "signal", **self._signals}))

    async def _read(self, ws: ClientConnection) -> None:
        async for raw in ws:
            try:
                frame = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(frame, dict):
                continue
            kind = frame.get("type")
            if kind == "delivery.say":
                await self._on_say(ws, frame)
            elif kind == "delivery.acked":
                self._on_acked(frame)
            elif kind == "error":
                self._on_error(frame)
            elif kind == "hello":
                # The server recorded this connection: deliveries may come now.
                self.connection_id = frame.get("connection_id")
                self._connected.set()

    async def _on_say(self, ws: ClientConnection, frame: dict[str, Any]) -> None:
        try:
            say = lenient(frame, DeliverySay)
        except msgspec.ValidationError:
            log.warning("agent stream: undecodable delivery.say %r", frame)
            return
        self.last_seq = max(self.last_seq, say.seq)
        finished = self._finished.get(say.delivery_id)
        if finished is not None:
            # Already said (or attached) here: the server lost our ack; repeat it, never the words.
            await ws.send(json.dumps(finished))
            return
        self._buffered += 1
        await self._queue.put(say)

    def _on_acked(self, frame: dict[str, Any]) -> None:
        try:
            result = lenient(frame, AckResult)
        except msgspec.ValidationError:
            return
        key = (result.delivery_id, result.status)
        self._unconfirmed.pop(key, None)
        future = self._waiters.pop(key, None)
        if future is not None and not future.done():
            future.set_result(result)

    def _on_error(self, frame: dict[str, Any]) -> None:
        error = HoldlineError(
            int(frame.get("status", 400)),
            str(frame.get("code", "error")),
            str(frame.get("code", "error")),
            str(frame.get("detail", "")),
        )
        delivery_id, status = frame.get("delivery_id"), frame.get("ack_status")
        if isinstance(delivery_id, str) and isinstance(status, str):
            key = (delivery_id, status)
            self._unconfirmed.pop(key, None)
            if status in _FINAL:
                self._finished.pop(delivery_id, None)
            future = self._waiters.pop(key, None)
            if future is not None and not future.done():
                future.set_exception(error)
                return
        log.warning("agent stream error: %s", error)

    async def _fail(self, error: HoldlineError) -> None:
        for future in self._waiters.values():
            if not future.done():
                future.set_exception(error)
        await self._queue.put(error)
