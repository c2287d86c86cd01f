"""An operation's history as the worker reads and extends it, through its repository.

Every append names the subject sequence it was decided from (`Op.seq`), so two writers never
both win; the loser gets `Stale`, reloads and decides again from the new truth.
"""

from __future__ import annotations

from dataclasses import dataclass

from libs import metrics
from libs.bus import ConcurrencyConflict, Loaded, Repository, Topology
from libs.clock import Clock, Ids
from libs.domain import OperationState, OpStatus, operation
from libs.events import (
    OperationAttempted,
    OperationEvent,
    OperationRetryScheduled,
    OperationStarted,
    OperationUnknown,
)


class Stale(Exception):
    """The operation changed under us: reload and decide again."""


@dataclass
class Op:
    """An operation as loaded, with the sequence to append after."""

    state: OperationState
    seq: int
    subject: str
    # Folded from the delivered admitted event, not read from the stream: true only until
    # the first guarded append says so (see `Steps.step`).
    seed: bool = False


class OperationHistory:
    """Loads operations and appends their events, guarded, with the worker's metrics."""

    def __init__(
        self,
        operations: Repository[OperationState, OperationEvent],
        topology: Topology,
        *,
        clock: Clock,
        ids: Ids,
    ) -> None:
        self._operations = operations
        self._topology = topology
        self._clock = clock
        self._ids = ids

    async def load(self, session_id: str, operation_id: str) -> Op | None:
        """The operation as the stream has it (None: no events)."""
        subject = self._topology.operation_subject(session_id, operation_id)
        loaded = await self._operations.load(subject)
        if loaded.state is None:
            return None
        return Op(loaded.state, loaded.last_seq, subject)

    async def read(self, subject: str) -> Loaded[OperationState, OperationEvent]:
        """Every event of an operation's subject (or its wildcard over sessions), folded."""
        return await self._operations.load(subject)

    async def append(self, op: Op, *events: OperationEvent) -> Op:
        """Append events in order after op.seq; raises Stale if someone wrote in between."""
        state, seq = op.state, op.seq
        for event in events:
            env = operation.envelope_for(
                state,
                event,
                event_id=self._ids.new("ev"),
                now=self._clock.now(),
            )
            try:
                ack = await self._operations.append(op.subject, env, expected=seq)
            except ConcurrencyConflict:
                raise Stale from None
            state, seq = operation.evolve(state, env), ack.seq
            self._observe(state, event)
        return Op(state, seq, op.subject)

    def _observe(self, state: OperationState, event: OperationEvent) -> None:
        tool = state.tool
        match event:
            case OperationStarted(attempt=1) if state.admitted_at is not None:
                metrics.OPERATION_ACCEPT_TO_START.labels(tool).observe(
                    (self._clock.now() - state.admitted_at).total_seconds()
                )
            case OperationAttempted(outcome=outcome) if outcome.startswith("timeout"):
                metrics.TIMEOUTS.labels(tool, outcome.removeprefix("timeout_")).inc()
            case OperationUnknown():
                metrics.UNKNOWNS.labels(tool).inc()
            case OperationRetryScheduled():
                metrics.RETRIES.labels(tool).inc()
        if state.terminal and state.admitted_at is not None:
            metrics.OPERATIONS_TERMINAL.labels(tool, state.status.value).inc()
            metrics.OPERATION_DURATION.labels(tool, state.status.value).observe(
                (self._clock.now() - state.admitted_at).total_seconds()
            )
            if state.status is OpStatus.CANCELLED:
                metrics.CANCELLATIONS_CONFIRMED.labels(tool).inc()
