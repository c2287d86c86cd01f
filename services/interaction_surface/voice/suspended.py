"""Audio a barge-in cut, held until the interruption's verdict (`SuspendedAudio`).

A barge-in may be a false interruption (a cough, an "uh-huh"): what it flushed is recorded
at once, but its outcome waits. A real turn leaves it unheard (`settle`); quiet for
`false_interruption_ms`, or words that were no turn, resume it from its first unheard word
(`resume`; what to say is `turn_taking.plan_resume`), and the cut utterance is heard only
if the rest is (`turn_taking.resumed`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from . import playback as pb
from . import turn_taking as tt
from .outbound import Playout
from .playback import Settled

log = logging.getLogger(__name__)


class SuspendedAudio:
    """One call's cut utterances waiting for the verdict, and the verdict's timer."""

    def __init__(
        self,
        out: Playout,
        *,
        name: str,
        window_ms: int,
        # Speaks a line on the call (`Call.say`).
        say: Callable[..., Awaitable[Settled]],
        # Keeps a background say alive until it is done.
        track: Callable[[asyncio.Task[Any]], None],
        # Records an utterance's outcome (`playback.finished`).
        record_finished: Callable[[Settled], None],
        # The interruption was no turn: the reply it cut may still answer.
        not_a_turn: Callable[[], None],
    ) -> None:
        self._out = out
        self._name = name
        self._window_ms = window_ms
        self._say = say
        self._track = track
        self._record_finished = record_finished
        self._not_a_turn = not_a_turn
        self._items: list[Settled] = []
        self._verdict: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> bool:
        """Some cut audio waits for the verdict."""
        return bool(self._items)

    @property
    def verdict_pending(self) -> bool:
        """The false-interruption window is running."""
        return self._verdict is not None

    def suspend(self, item: Settled) -> None:
        """Flushed audio (recorded now); its outcome waits for the interruption's verdict."""
        self._out.stop_stream(item.utterance.playback_id)
        self._record_finished(item)
        self._items.append(item)

    def await_verdict(self) -> None:
        """Start the false-interruption window: quiet until it ends resumes the cut audio."""
        self._verdict = asyncio.create_task(self._await_false_interruption())

    def cancel_verdict(self) -> None:
        """The caller spoke again, or the call ended: the window stops."""
        if self._verdict is not None:
            self._verdict.cancel()
            self._verdict = None

    def settle(self, reason: str) -> None:
        """The interruption was real (or the call ended): what was cut stays unheard."""
        items, self._items = self._items, []
        for item in items:
            self._out.resolve(pb.unheard(item, reason))

    def resume(self) -> None:
        """The interruption was not a turn: what it cut goes on from its first unheard word."""
        self._not_a_turn()
        if self._out.closed or not self._items:
            return
        items, self._items = self._items, []
        for item in items:
            self._track(asyncio.create_task(self._resume(item)))

    async def _await_false_interruption(self) -> None:
        await asyncio.sleep(self._window_ms / 1000)
        self._verdict = None
        self.resume()

    async def _resume(self, item: Settled) -> None:
        """Say the unheard rest; the cut utterance is heard only if the rest is."""
        u = item.utterance
        plan = tt.plan_resume(u.text, item.heard_text, u.playback_id)
        if isinstance(plan, tt.HeardAll):
            self._out.resolve(
                Settled(u, heard=True, played_ms=u.duration_ms, reason="played_out")
            )
            return
        try:
            after = await self._say(
                plan.text, plan.playback_id,
                delivery_id=u.delivery_id, response_id=u.response_id, turn_id=u.turn_id,
            )
        except Exception:
            log.exception("call %s: resuming %s failed", self._name, u.playback_id)
            after = Settled(u, heard=False, played_ms=0, reason="resume_failed")
        self._out.resolve(tt.resumed(item, after))
