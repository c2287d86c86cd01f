"""Erasure: `DELETE /v1/sessions/{id}` removes a session's words from the broker.

Every subject of every stream carries the session id (`libs/bus/topology.py`), so a
session is purged by subject filter, which JetStream allows on streams that deny deletes:

- at once: its interaction subject (all but the last message, the `session.closed`
  `erased` marker), its control subject, its dead letters (`<prefix>.dlq.*.<session>`) and
  its KV entries that hold text (the Agent API's stored tool-call answers, `hl_turns`);
- once its business is settled (every operation terminal, every batch closed, no delivery
  open; or every operation terminal for `GRACE_S`): every operation, batch, delivery and
  work message of the session. Operations admitted before the erasure keep running to
  their outcome first (their events are the worker's and the coordinator's state until
  then); the sweeper (`Sweeper` over `Eraser.sweep`) purges
  again whenever an erased session's streams grow, so a late event is purged too.

What remains is listed in docs/guides/erasure-and-limits.md: the marker, the effects at the
providers, and the KV entries keyed by digests (intents, deliveries, leases), which hold ids
and digests only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext

from libs.bus import Context, Topology

from .session_log import STREAM_INDEX, SessionLog
from .view import SurfaceView

log = logging.getLogger(__name__)

# Purged as soon as the session is erased (the interaction subject keeps its marker).
AT_ONCE: tuple[Context, ...] = (Context.CONTROL, Context.DLQ)
# Purged once the session's business is settled.
SETTLED: tuple[Context, ...] = (
    Context.OPERATIONS,
    Context.BATCHES,
    Context.DELIVERIES,
    Context.WORK,
)
# How long after an erasure a session whose operations are all terminal is purged even with
# a batch or a delivery still open (seconds).
GRACE_S = 120.0
# The view's streams whose growth after a purge means something is left to purge.
_FOLLOWED = (Context.CONTROL, Context.OPERATIONS, Context.BATCHES, Context.DELIVERIES)


def session_filter(topology: Topology, context: Context, session_id: str) -> str:
    """Every subject of one session in a context's stream (dead letters: any source)."""
    if context is Context.DLQ:
        return f"{topology.prefix}.dlq.*.{session_id}"
    return topology.session_filter(context, session_id)


def settled(view: SurfaceView, session_id: str) -> bool:
    """Whether nothing of the session's business is still running: every operation terminal,
    every batch closed (or empty), no delivery that may still be said."""
    return (
        all(o.terminal for o in view.session_operations(session_id))
        and all(b.closed or not b.members for b in view.session_batches(session_id))
        and not any(d.open for d in view.session_deliveries(session_id))
    )


def _marks(found: SessionLog) -> tuple[int, ...]:
    return tuple(found.high[STREAM_INDEX[c]] for c in _FOLLOWED)


class Eraser:
    """Purges erased sessions from the streams and buckets (idempotent: several surfaces may
    purge the same session)."""

    def __init__(
        self,
        view: SurfaceView,
        topology: Topology,
        jetstream: Callable[[], JetStreamContext],
    ) -> None:
        self._view = view
        self._topology = topology
        self._js = jetstream
        # Per erased session, the view's marks when it was last purged in full, and when this
        # process first saw it erased.
        self._purged: dict[str, tuple[int, ...]] = {}
        self._seen: dict[str, float] = {}

    async def purge_now(self, session_id: str) -> None:
        """What goes at once: the interaction subject but its marker, control, dead letters,
        the stored tool-call answers; then the rest if the business is settled."""
        js = self._js()
        await js.purge_stream(
            self._topology.stream_name(Context.INTERACTION),
            subject=self._topology.session_subject(session_id),
            keep=1,
        )
        for context in AT_ONCE:
            await self._purge(js, context, session_id)
        await self._purge_answers(session_id, js)
        await self.purge_settled(session_id)

    async def purge_settled(self, session_id: str) -> bool:
        """Purge the session's business events if settled and not purged since they last
        grew; True when it purged."""
        found = self._view.log(session_id)
        if found is None or not found.erased:
            return False
        first = self._seen.setdefault(session_id, time.monotonic())
        if not settled(self._view, session_id) and not (
            # A closing that waits for a turn that will never come: once every operation is
            # terminal and a grace period passed, the session is purged anyway.
            time.monotonic() - first >= GRACE_S
            and all(o.terminal for o in self._view.session_operations(session_id))
        ):
            return False
        marks = _marks(found)
        if self._purged.get(session_id) == marks:
            return False
        js = self._js()
        for context in (*AT_ONCE, *SETTLED):
            await self._purge(js, context, session_id)
        await self._purge_answers(session_id, js)
        self._purged[session_id] = marks
        # The words leave this process's memory too (every reader answers 404 already).
        found.entries = []
        log.info("session %s purged from every stream", session_id)
        return True

    async def sweep(self) -> int:
        """One pass over every erased session this view knows; how many were purged."""
        purged = 0
        for session_id in [s for s, f in self._view.logs.items() if f.erased]:
            try:
                purged += await self.purge_settled(session_id)
            except Exception:  # noqa: BLE001 - the next pass tries again
                log.warning("purging erased session %s failed; retrying", session_id)
        return purged

    async def _purge(self, js: JetStreamContext, context: Context, session_id: str) -> None:
        await js.purge_stream(
            self._topology.stream_name(context),
            subject=session_filter(self._topology, context, session_id),
        )

    async def _purge_answers(self, session_id: str, js: JetStreamContext) -> None:
        # The bucket's stream purged by the session's keys (`<session>.tc.<digest>`): every
        # revision goes, and a read then finds no key, as if none had been stored.
        bucket = self._topology.bucket("turns")
        await js.purge_stream(f"KV_{bucket}", subject=f"$KV.{bucket}.{session_id}.>")


class Sweeper:
    """Runs `sweep` every `interval_s` seconds from `start` until `stop` (0: never)."""

    def __init__(self, sweep: Callable[[], Awaitable[int]], interval_s: float) -> None:
        self._sweep = sweep
        self._interval_s = interval_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin sweeping (once the view has caught up)."""
        if self._interval_s > 0 and self._task is None:
            self._task = asyncio.create_task(self._run(), name="erasure-sweeper")

    async def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self._interval_s)
            if not self._stop.is_set():
                await self._sweep()

    async def stop(self) -> None:
        """Stop sweeping and wait for a pass under way."""
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
