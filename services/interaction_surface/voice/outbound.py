"""The agent's audio going out on one call (`Playout`): synthesis into media pieces, paced
sending behind the hold gate, clears, and the answers `say` waits for.

Paced playout: the agent's audio goes out at the pace it plays, `playout_lead_ms` ahead of
the playout model (`playback.pace_delay_ms`). A hold (a suspected barge-in) closes a gate:
nothing more is sent and nothing is flushed; a release sends on from the next byte. When a
queued utterance is dropped unsent is `playback.abandon_reason`. The call (call.py) decides
when to hold, release, clear and cut; this carries it out on the socket.

Times: `now_ms` (monotonic, since the call started) measures how long audio has played on a
phone that plays in real time; it drives the playout model and is no event's time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from libs.events import PlaybackStarted

from . import playback as pb
from .codec import ulaw_ms
from .engines.base import TextToSpeech
from .playback import PlaybackLedger, Settled
from .wire import CallWire

log = logging.getLogger(__name__)

# Outbound media message size: 40 ms of μ-law, so paced sending stops within 40 ms.
_MEDIA_BYTES = 320


@dataclass
class _Pending:
    settled: asyncio.Future[Settled]
    task: asyncio.Task[None] | None = None


class Playout:
    """One call's outbound audio and the utterances waiting for their outcome."""

    def __init__(
        self,
        wire: CallWire,
        *,
        name: str,
        tts: TextToSpeech,
        lead_ms: int,
        # Records `playback.started` (with the utterance's ids) once its length is known.
        started: Callable[[PlaybackStarted, dict[str, Any]], None],
        # Records an utterance's outcome (`playback.finished`).
        finished: Callable[[Settled], None],
    ) -> None:
        self.wire = wire
        self.ledger = PlaybackLedger()
        self.clears = 0
        self.closed = False
        self._name = name
        self._tts = tts
        self._lead_ms = lead_ms
        self._started = started
        self._finished = finished
        self._t0 = time.monotonic()
        self._pending: dict[str, _Pending] = {}
        self._speak_lock = asyncio.Lock()
        self._send_lock = asyncio.Lock()
        # Bumped by every cut: an utterance queued before it is not said any more.
        self._generation = 0
        # Closed while a suspected barge-in is being checked: nothing more is sent, nothing
        # is flushed, so a false alarm costs at most a short gap and repeats nothing.
        self._flowing = asyncio.Event()
        self._flowing.set()

    def now_ms(self) -> int:
        """Milliseconds since the call started (a measurement: the phone plays in real time)."""
        return int((time.monotonic() - self._t0) * 1000)

    @property
    def flowing(self) -> bool:
        """Whether sending may go on (not held)."""
        return self._flowing.is_set()

    def hold(self) -> None:
        """Stop sending; nothing is flushed."""
        self._flowing.clear()

    def release(self) -> None:
        """Sending goes on from the next byte."""
        self._flowing.set()

    def cut(self) -> None:
        """A barge-in: utterances queued behind the cut audio are dropped when their turn comes."""
        self._generation += 1

    def close(self) -> None:
        """The call ended: nothing more is sent (a held stream wakes up and stops)."""
        self.closed = True
        self._flowing.set()

    def stop_all(self) -> None:
        """Every stream still sending stops."""
        for pending in list(self._pending.values()):
            if pending.task is not None and not pending.task.done():
                pending.task.cancel()

    async def send(self, send: Callable[[], Awaitable[None]]) -> None:
        """One send on the wire, in order (dropped once the call ended)."""
        if self.closed:
            return
        async with self._send_lock:
            await send()

    async def clear(self) -> None:
        """Flush what the phone has queued (`clear`)."""
        await self.send(self.wire.send_clear)
        self.clears += 1

    def stop_stream(self, playback_id: str) -> None:
        """Stop sending an utterance (it was flushed; its outcome is decided elsewhere)."""
        pending = self._pending.get(playback_id)
        if pending is not None and pending.task is not None and not pending.task.done():
            pending.task.cancel()

    def settle(self, item: Settled) -> None:
        """Answer whoever waits on the utterance and record its outcome."""
        self.resolve(item)
        self._finished(item)

    def resolve(self, item: Settled) -> None:
        """Answer whoever waits on the utterance (`say`)."""
        pending = self._pending.pop(item.utterance.playback_id, None)
        if pending is not None:
            if pending.task is not None and not pending.task.done():
                pending.task.cancel()
            if not pending.settled.done():
                pending.settled.set_result(item)

    def on_mark(self, name: str) -> None:
        """A mark came back from the phone."""
        settled = self.ledger.on_mark(name, self.now_ms())
        if settled is not None:
            self.settle(settled)

    async def say(
        self,
        text: str,
        playback_id: str,
        *,
        interrupt: bool,
        caller_speaking: Callable[[], bool],
        ids: dict[str, str | None],
    ) -> Settled:
        """Speak `text`; the answer says whether it was heard, and how much of it played."""
        if interrupt and self.ledger.active:
            await self.clear()
            for item in self.ledger.clear(self.now_ms(), "urgent_interrupt"):
                self.settle(item)
        loop = asyncio.get_running_loop()
        pending = _Pending(loop.create_future())
        self._pending[playback_id] = pending
        generation = self._generation
        async with self._speak_lock:
            dropped_because = pb.abandon_reason(
                closed=self.closed,
                cut_while_queued=generation != self._generation,
                interrupt=interrupt,
                is_delivery=playback_id == ids.get("delivery_id"),
                caller_speaking=caller_speaking(),
            )
            if dropped_because is not None:
                return self.abandon(playback_id, text, dropped_because, ids)
            self.ledger.begin(playback_id, text, self.now_ms(), **ids)
            pending.task = asyncio.create_task(self._stream(playback_id, text, ids))
            await asyncio.wait({pending.task})
            if not pending.task.cancelled() and pending.task.exception() is not None:
                log.error("call %s: TTS failed: %r", self._name, pending.task.exception())
                dropped = self.ledger.drop(playback_id, self.now_ms(), "tts_failed")
                if dropped is not None:
                    self.settle(dropped)
        return await pending.settled

    def abandon(
        self, playback_id: str, text: str, reason: str, ids: dict[str, str | None]
    ) -> Settled:
        """An utterance given up before any of it was sent."""
        self._pending.pop(playback_id, None)
        self.ledger.begin(playback_id, text, self.now_ms(), **ids)
        dropped = self.ledger.drop(playback_id, self.now_ms(), reason)
        assert dropped is not None
        return dropped

    async def _stream(self, playback_id: str, text: str, ids: dict[str, str | None]) -> None:
        """Synthesis runs ahead into a queue; sending follows the playout pace."""
        pieces: asyncio.Queue[bytes | None] = asyncio.Queue()
        producer = asyncio.create_task(self._synthesize(playback_id, text, ids, pieces))
        try:
            while (piece := await pieces.get()) is not None:
                await self._pace()
                await self.send(functools.partial(self.wire.send_audio, piece))
                self.ledger.add_audio(playback_id, ulaw_ms(piece), self.now_ms())
            # A failed synthesis raises here: no mark for audio that never finished.
            await producer
        finally:
            if not producer.done():
                producer.cancel()
        await self.send(functools.partial(self.wire.send_mark, playback_id))
        self.ledger.sent(playback_id)

    async def _synthesize(
        self,
        playback_id: str,
        text: str,
        ids: dict[str, str | None],
        pieces: asyncio.Queue[bytes | None],
    ) -> None:
        """TTS into media-sized pieces; `playback.started` once the whole length is known
        (the policy sees the agent talking from the start of the utterance)."""
        sent = 0
        try:
            async for chunk in self._tts.stream(text):
                for start in range(0, len(chunk), _MEDIA_BYTES):
                    pieces.put_nowait(chunk[start : start + _MEDIA_BYTES])
                sent += len(chunk)
            self._started(
                PlaybackStarted(text=text, duration_ms=ulaw_ms(sent)),
                {"playback_id": playback_id, **ids},
            )
        finally:
            pieces.put_nowait(None)

    async def _pace(self) -> None:
        """Wait until the next piece may go: not held, and at most the lead queued ahead."""
        while True:
            await self._flowing.wait()
            delay = pb.pace_delay_ms(self._lead_ms, self.ledger.queued_ms(self.now_ms()))
            if delay == 0:
                return
            await asyncio.sleep(delay / 1000)
