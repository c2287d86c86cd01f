"""Dead-lettering an operation: the DLQ gets its full history, the operation a mark."""

from __future__ import annotations

import logging

import msgspec

from libs import metrics
from libs.bus import Context, DeadLetter, EventStore, Topology
from libs.clock import Clock
from libs.events import OPERATIONS, OperationDeadLettered

from .history import Op, OperationHistory, Stale

log = logging.getLogger(__name__)


class OperationDeadLetters:
    """Stores an operation's dead letter once (by operation and sequence) and marks it."""

    def __init__(
        self,
        store: EventStore,
        history: OperationHistory,
        topology: Topology,
        *,
        worker_id: str,
        clock: Clock,
    ) -> None:
        self._store = store
        self._history = history
        self._topology = topology
        self._worker_id = worker_id
        self._clock = clock

    async def dead_letter(self, op: Op, reason: str) -> None:
        """Terminal failure or an unresolvable operation: the DLQ gets its full history."""
        history = await self._history.read(op.subject)
        record = DeadLetter(
            source_stream=self._topology.stream_name(Context.OPERATIONS),
            source_subject=op.subject,
            source_seq=op.seq,
            consumer=f"operation-worker/{self._worker_id}",
            num_delivered=op.state.attempts,
            reason=reason,
            error=op.state.failure or "",
            payload=msgspec.json.encode([OPERATIONS.encode(e).decode() for e in history.events]),
            dead_lettered_at=self._clock.now(),
        )
        subject = self._topology.dlq_subject(Context.OPERATIONS, op.state.session_id)
        await self._store.put(
            subject,
            msgspec.json.encode(record),
            msg_id=f"dlq:{op.state.operation_id}:{op.seq}",
        )
        metrics.DEAD_LETTERS.labels("operations", reason.split(":", maxsplit=1)[0][:40]).inc()
        if not op.state.dead_lettered:
            try:
                await self._history.append(op, OperationDeadLettered(reason=reason))
            except Stale:
                log.info(
                    "dead-letter mark for %s raced; the record is stored", op.state.operation_id
                )
