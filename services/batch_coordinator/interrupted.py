"""Batches whose turn died between `batch.opened` and the admission of their members.

Admission opens the batch first (the other order would let an admitted operation run with
no batch to close it), so a surface killed in between leaves members that never get an
event. Nothing was promised to the caller (that turn never replied) and nothing ran, but
the batch would stay open for ever. The sweep gives each silent member its first event,
`operation.rejected` with reason `interrupted`, guarded at expected sequence 0: if the
admission is only late, whichever lands first stands and the other is refused. The
rejection then settles the member like any other, and the batch closes once.

Admissions are not delivered to the coordinator (`batch.opened` names what a closing says
of each member), so a member still running past the grace with no other event delivered
is tried too: the guard refuses the rejection (its admission is there), which costs one
refused append per such member, and it counts as heard from then on.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from libs.bus import ConcurrencyConflict
from libs.clock import Clock
from libs.domain.batch import BatchState
from libs.events import Envelope, OperationEvent, OperationRejected
from libs.models.phrasing import reason_words

from .domain import silent_members
from .handlers import Coordinator
from .settings import Settings

log = logging.getLogger(__name__)


class InterruptedSweep:
    """Finds the silent members of open batches and rejects them as interrupted."""

    def __init__(self, coordinator: Coordinator, settings: Settings, clock: Clock) -> None:
        self._coordinator = coordinator
        self._grace = timedelta(seconds=settings.interrupted_grace_s)
        self._every_s = settings.interrupted_sweep_s
        self._clock = clock
        self._detail = reason_words("interrupted", "rejected", settings.language)
        # Members found to have events after all (the view was behind): never tried again.
        self._spoken: set[str] = set()

    def _heard(self, operation_id: str) -> bool:
        c = self._coordinator
        return (
            operation_id in self._spoken
            or operation_id in c.terminal
            or c.members.get(operation_id) is not None
        )

    async def run(self) -> None:
        """Sweep every `interrupted_sweep_s` until cancelled; a failed sweep is tried again."""
        while True:
            await asyncio.sleep(self._every_s)
            try:
                await self.sweep()
            except Exception:
                # The broker may be away; the next sweep tries again.
                log.warning("interrupted-batch sweep failed", exc_info=True)

    async def sweep(self) -> int:
        """One pass over the open batches; how many members it rejected."""
        now = self._clock.now()
        rejected = 0
        for state in list(self._coordinator.batches.states.values()):
            for operation_id, tool in silent_members(state, self._heard, now, self._grace):
                rejected += await self._reject(state, operation_id, tool)
        return rejected

    async def _reject(self, state: BatchState, operation_id: str, tool: str) -> int:
        env: Envelope[OperationEvent] = Envelope(
            # Derived from the member, so a resend after a lost ack is the same message.
            event_id=f"{operation_id}-interrupted",
            occurred_at=self._clock.now(),
            session_id=state.session_id,
            turn_id=state.turn_id,
            operation_id=operation_id,
            batch_id=state.batch_id,
            agent=state.agent,
            event=OperationRejected(
                tool=tool,
                reason="interrupted",
                # The closing quotes it: words for the caller, who never heard an acceptance.
                detail=self._detail,
            ),
        )
        topology = self._coordinator.runtime.topology
        subject = topology.operation_subject(state.session_id, operation_id)
        try:
            await self._coordinator.operations.append(subject, env, expected=0)
        except ConcurrencyConflict:
            self._spoken.add(operation_id)
            return 0
        log.warning(
            "batch %s: member %s had no event %.0fs after the opening; rejected as interrupted",
            state.batch_id, operation_id, self._grace.total_seconds(),
        )
        return 1
