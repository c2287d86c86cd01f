"""Opening a turn on the session's event log, and answering a repeated `client_turn_id`.

`turn.received` is appended with the session subject's expected last sequence, and only
when no other turn is open: two processes can never both open a turn, and a crashed turn
expires after a timeout. The same log answers a repeated `client_turn_id`: the view is
current for the session whenever that guarded append succeeds, so an id the view has not
seen was never received. A repeat gets the answer rebuilt from its first run's
`turn.replied`, waits while that run is open, and runs again once that run's turn expired
unreplied (`turn_plan.opening`). Lost races are read again under the one conflict policy;
past it the turn is busy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from libs import metrics
from libs.bus import ConcurrencyConflict, Context
from libs.clock import Clock, Ids
from libs.events import Envelope, InteractionEvent, TurnReceived

from ..core.view import SurfaceView
from ..core.writes import SurfaceWrites
from ..settings import Settings
from . import turn_plan

if TYPE_CHECKING:
    from .turns import TurnInput


class TurnBusy(Exception):
    """Another turn of the session is still open after waiting for it."""


class TurnPending(Exception):
    """A request with the same client turn id is still being answered elsewhere."""


@dataclass(frozen=True, slots=True)
class Repeat:
    """A repeated client turn id's answer, rebuilt from its first run's reply."""

    answer: dict[str, Any]


class TurnLog:
    """Takes a session's turn through its log."""

    def __init__(
        self,
        view: SurfaceView,
        writes: SurfaceWrites,
        settings: Settings,
        *,
        clock: Clock,
        ids: Ids,
    ) -> None:
        self._view = view
        self._writes = writes
        self._settings = settings
        self._clock = clock
        self._ids = ids

    async def open(
        self, session_id: str, turn_id: str, request: TurnInput
    ) -> str | Repeat:
        """Append `turn.received` once no other turn of the session is open (any process),
        unless the request repeats a client turn id whose reply is in the log."""
        subject = self._writes.topology.session_subject(session_id)
        busy_deadline = time.monotonic() + self._settings.turn_wait_s
        # A repeat waits as long as its first run may still take to answer.
        pending_deadline = busy_deadline + self._settings.model_timeout_s
        expiry = timedelta(seconds=self._settings.turn_timeout_s)
        conflicts = 0
        attempts = self._writes.retry.attempts
        while True:
            found = self._view.log(session_id)
            seq = found.session_seq if found is not None else 0
            repeat_of = None
            if found is not None and request.client_turn_id is not None:
                repeat_of = found.client_turns.get(request.client_turn_id)
            verdict = turn_plan.opening(
                repeat_of=repeat_of,
                replied=found is not None and repeat_of in found.replies,
                open_turn=found.open_turn if found is not None else None,
                now=self._clock.now(),
                expiry=expiry,
            )
            if verdict == "answered":
                assert found is not None
                assert repeat_of is not None
                return Repeat(
                    turn_plan.answer_of_reply(
                        found.replies[repeat_of], found.turn_channels[repeat_of]
                    )
                )
            if verdict != "open":
                deadline = busy_deadline if verdict == "wait" else pending_deadline
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if verdict == "wait":
                        raise TurnBusy(session_id)
                    raise TurnPending(f"{session_id}.{request.client_turn_id}")
                await self._view.wait_session_change(session_id, min(remaining, 0.5))
                continue
            env: Envelope[InteractionEvent] = Envelope(
                event_id=self._ids.new("ev"),
                occurred_at=self._clock.now(),
                session_id=session_id,
                turn_id=turn_id,
                agent=request.session.agent,
                event=TurnReceived(
                    channel=request.channel,
                    text=request.text,
                    client_turn_id=request.client_turn_id,
                ),
            )
            try:
                with metrics.turn_phase("received_append"):
                    # Waits until the view applied it (the repository's view source).
                    await self._writes.interaction.append(subject, env, expected=seq)
            except ConcurrencyConflict:
                # Someone wrote to the session since our view of it: catch up and look again
                # (a repeat of this client turn id may be what was written). Only the
                # interaction stream is read again (sequence, open turn, client turn ids),
                # so only it is waited for, not the backlog of the operation streams.
                conflicts += 1
                if conflicts >= attempts:
                    raise TurnBusy(session_id) from None
                with metrics.turn_phase("conflict_sync"):
                    await self._view.sync(contexts=(Context.INTERACTION,))
                continue
            return env.event_id
