"""`WS /v1/sessions/{id}/stream`: the session's events, pushed live, resumable.

Frames (JSON text), each with the `cursor` to resume after it:
- `{"type": "hello", "session_id", "cursor", "snapshot"}` once, first;
- `{"type": "message", "cursor", "message": {role, text, turn_id, delivery_id}, "event"}`
  for a visible message (a user turn, a reply, a proactive closing);
- `{"type": "event", "cursor", "event"}` for every other event (timeline item format);
- `{"type": "snapshot", "cursor", "snapshot"}` after each burst of events.
A cursor lists the last sequence seen in each of the session's five streams. Reconnecting
with `?after=<cursor>` replays exactly the events after it, then continues live: nothing
is lost and nothing is sent twice. The live view registers the listener and reads the
backlog with no await in between, so no event can fall into the gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from fastapi import WebSocket, WebSocketDisconnect

from libs.events import TurnReceived, TurnReplied

from ..core.session_log import Cursor, Entry, encode_cursor
from ..core.snapshot import build_snapshot, message_view, timeline_item
from ..core.view import SurfaceView

log = logging.getLogger(__name__)

# A slow client holding more than this many frames is disconnected; it resumes by cursor.
_MAX_QUEUED = 5000


def frame_for(entry: Entry) -> dict[str, Any]:
    """The frame pushed for one event."""
    item = timeline_item(entry)
    event = entry.envelope.event
    env = entry.envelope
    if isinstance(event, TurnReceived):
        message = message_view("user", event.text, env.turn_id, None)
        return {"type": "message", "cursor": item["cursor"], "message": message, "event": item}
    if isinstance(event, TurnReplied):
        message = message_view("assistant", event.text, env.turn_id, env.delivery_id)
        return {"type": "message", "cursor": item["cursor"], "message": message, "event": item}
    return {"type": "event", "cursor": item["cursor"], "event": item}


class SessionStream:
    """One WebSocket connection of one session."""

    def __init__(self, view: SurfaceView, websocket: WebSocket, session_id: str) -> None:
        self._view = view
        self._ws = websocket
        self._session_id = session_id
        self._queue: asyncio.Queue[Entry] = asyncio.Queue()
        self._overflow = False

    def _listen(self, entry: Entry) -> None:
        if self._queue.qsize() >= _MAX_QUEUED:
            self._overflow = True
            return
        self._queue.put_nowait(entry)

    def _snapshot(self) -> dict[str, Any] | None:
        state = self._view.session(self._session_id)
        found = self._view.log(self._session_id)
        if state is None or found is None:
            return None
        return build_snapshot(
            state,
            self._view.session_operations(self._session_id),
            self._view.session_batches(self._session_id),
            self._view.session_deliveries(self._session_id),
            found.cursor,
            label=self._view.label,
        )

    async def run(self, after: Cursor) -> None:
        """Send the backlog after `after`, then live events, until the client leaves."""
        found = self._view.subscribe(self._session_id, self._listen)
        backlog = [e for e in found.entries if e.after(after)]
        try:
            # The hello names where this connection starts; each frame then moves it on.
            start = after if backlog else found.cursor
            sender = asyncio.create_task(self._send(backlog, start))
            receiver = asyncio.create_task(self._receive())
            done, pending = await asyncio.wait(
                {sender, receiver}, return_when=asyncio.FIRST_COMPLETED
            )
            for task in pending:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            for task in done:
                exc = task.exception()
                if exc is not None and not isinstance(exc, WebSocketDisconnect):
                    log.warning("stream of %s ended: %r", self._session_id, exc)
        finally:
            self._view.unsubscribe(self._session_id, self._listen)

    async def _send(self, backlog: list[Entry], cursor: Cursor) -> None:
        await self._ws.send_json(
            {
                "type": "hello",
                "session_id": self._session_id,
                "cursor": encode_cursor(cursor),
                "snapshot": self._snapshot(),
            }
        )
        for entry in backlog:
            await self._ws.send_json(frame_for(entry))
        if backlog:
            await self._send_snapshot()
        while True:
            entry = await self._queue.get()
            await self._ws.send_json(frame_for(entry))
            while not self._queue.empty():
                await self._ws.send_json(frame_for(self._queue.get_nowait()))
            if self._overflow:
                await self._ws.close(code=1013, reason="too slow; resume with after=<cursor>")
                return
            found = self._view.log(self._session_id)
            if found is not None and found.erased:
                # The same answer a new connection gets (4000 + 404): the session is gone.
                await self._ws.close(code=4404, reason="session erased")
                return
            await self._send_snapshot()

    async def _send_snapshot(self) -> None:
        snapshot = self._snapshot()
        if snapshot is not None:
            await self._ws.send_json(
                {"type": "snapshot", "cursor": snapshot["cursor"], "snapshot": snapshot}
            )

    async def _receive(self) -> None:
        # Clients may send anything (pings); only a disconnect matters.
        while True:
            await self._ws.receive_text()
