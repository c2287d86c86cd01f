"""Idle sessions leave the surface's memory and come back from the streams on demand.

A session is evicted when nothing of it happened for `HOLDLINE_SESSION_IDLE_S` and nothing
of it is running: no open turn, no listener (stream or agent socket), every operation
terminal, every batch closed, no delivery open. Its log and its states leave every
projection of the view; the view remembers only its id (`SurfaceView.evicted`).

The next request for it (`Surface.session_for_token`, which every session route and socket
goes through) restores it first: every stream's messages of the session are read (by the
session's subject filter) and folded again, in the order they happened, so its history,
snapshot and cursor are as before. An event of an evicted session that arrives meanwhile
(a late retry) is held and folded after the restore, which it starts (`EvictedSessions`: the
ids, the held events and the restores under way, which the view delegates to).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from nats.js import JetStreamContext

from libs.bus import EVENT_CODECS, Context, Topology, read_subject
from libs.events import Envelope

from .session_log import STREAMS, SessionLog

log = logging.getLogger(__name__)

# One event of a stream as the view folds it: the stream, the envelope, its sequence.
Held = tuple[Context, Envelope[Any], int]


def idle_and_settled(view: Any, found: SessionLog, now: float, idle_s: float) -> bool:
    """Whether the session may leave memory: idle that long, and nothing of it running."""
    session_id = found.session_id
    return (
        now - found.touched >= idle_s
        and not found.listeners
        and found.open_turn is None
        and not found.erased
        and all(o.terminal for o in view.session_operations(session_id))
        and all(b.closed or not b.members for b in view.session_batches(session_id))
        and not any(d.open for d in view.session_deliveries(session_id))
    )


def forget(view: Any, found: SessionLog) -> None:
    """Drop a session's log and its states from every projection of the view."""
    session_id = found.session_id
    for op in found.operation_ids:
        view.operations.states.pop(op, None)
        view.operations.last_seq.pop(op, None)
        view.terminal.pop(op, None)
    for batch_id in found.batch_ids:
        view.batches.states.pop(batch_id, None)
        view.batches.last_seq.pop(batch_id, None)
    for delivery_id in found.delivery_ids:
        view.deliveries.states.pop(delivery_id, None)
        view.deliveries.last_seq.pop(delivery_id, None)
    view.sessions.states.pop(session_id, None)
    view.sessions.last_seq.pop(session_id, None)
    del view.logs[session_id]


def touch(view: Any, session_id: str) -> None:
    """A session was asked for: it is not idle."""
    found = view.logs.get(session_id)
    if found is not None:
        found.touched = time.monotonic()


def evict_idle(view: Any, idle_s: float, now: float | None = None) -> int:
    """Evict every idle, settled session; how many were evicted (idle_s 0: none)."""
    if idle_s <= 0:
        return 0
    now = time.monotonic() if now is None else now
    gone = [f for f in view.logs.values() if idle_and_settled(view, f, now, idle_s)]
    for found in gone:
        forget(view, found)
        view.evicted.add(found.session_id)
    if gone:
        named = ", ".join(f.session_id for f in gone[:5])
        log.info("evicted %d idle sessions from memory (%s)", len(gone), named)
    return len(gone)


async def read_history(
    js: JetStreamContext, topology: Topology, session_id: str
) -> list[Held]:
    """Every event of the session in the five streams, merged in the order they happened
    (each stream's own order kept): what the view folds to restore it."""
    per_stream: list[list[Held]] = []
    for context in STREAMS:
        replayed = await read_subject(
            js, topology.stream_name(context), topology.session_filter(context, session_id),
            EVENT_CODECS[context],
        )
        per_stream.append([(context, r.envelope, r.stream_seq) for r in replayed.items])
    merged: list[Held] = []
    # A merge by time that never reorders one stream: each stream's head competes.
    heads = [
        (items[0][1].occurred_at, i, 0) for i, items in enumerate(per_stream) if items
    ]
    heapq.heapify(heads)
    while heads:
        _at, i, j = heapq.heappop(heads)
        merged.append(per_stream[i][j])
        if j + 1 < len(per_stream[i]):
            heapq.heappush(heads, (per_stream[i][j + 1][1].occurred_at, i, j + 1))
    return merged


class EvictedSessions:
    """The sessions out of the view's memory: their ids, the events of theirs that arrived
    since (held until the restore folds them), and the restores under way."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self._held: dict[str, list[Held]] = {}
        self._restoring: dict[str, asyncio.Future[None]] = {}

    def __bool__(self) -> bool:
        return bool(self.ids)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self.ids

    def add(self, session_id: str) -> None:
        """The session left memory."""
        self.ids.add(session_id)

    def hold(
        self, held: Held, restore: Callable[[str], Coroutine[Any, Any, None]]
    ) -> None:
        """An event of an evicted session: kept for its restore, which it starts if none runs."""
        session_id = held[1].session_id
        self._held.setdefault(session_id, []).append(held)
        if session_id not in self._restoring:
            with contextlib.suppress(RuntimeError):  # no loop: restored on demand
                asyncio.get_running_loop().create_task(restore(session_id))

    async def restore(
        self,
        session_id: str,
        history: Callable[[], Awaitable[list[Held]]],
        apply: Callable[[Context, Envelope[Any], int], None],
    ) -> None:
        """Fold the session's `history`, then what was held of it, through `apply`; a no-op
        for a session in memory. Concurrent callers share one restore."""
        if session_id not in self.ids:
            return
        running = self._restoring.get(session_id)
        if running is not None:
            await asyncio.shield(running)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._restoring[session_id] = done
        try:
            found = await history()
            # No await from here on: nothing of the session arrives in between.
            self.ids.discard(session_id)
            for context, env, seq in [*found, *self._held.pop(session_id, [])]:
                apply(context, env, seq)
        finally:
            del self._restoring[session_id]
            done.set_result(None)
