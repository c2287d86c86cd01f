"""The worker's thin shell: the consumers' entry points, one run per operation at a time.

Two consumers and one HTTP route feed it, the consumers competing with every other worker:
- execute: `operation.admitted` / `operation.cancel_requested` on the operations stream,
  mapped by `policy` to the work they call for and run right there (an admitted first event
  is the operation's state: nothing is read before the first append);
- work: execute / cancel commands on the work queue (an operator's re-drive, a copy);
- callbacks: the provider's signed async completions (`callbacks.py`).
The parts, by role: `history.py` (load and append through the operations repository),
`leasing.py` (who runs an operation), `steps.py` (the step loop and the executor's calls),
`dead_letters.py` (the DLQ); every decision is in `domain.py`.
"""

from __future__ import annotations

import asyncio

from libs.bus import (
    CONFLICT_RETRY,
    ConflictRetry,
    ConnectedEventStore,
    EventStore,
    Poison,
    Received,
    Repository,
    aggregates,
    appended_to_empty,
)
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.events import OperationEvent, WorkCommand
from libs.service import Runtime
from libs.tools import CallbackResult, ToolRegistry

from .callbacks import FOREIGN, ProviderCallbacks
from .dead_letters import OperationDeadLetters
from .domain import policy, seeded
from .history import Op, OperationHistory
from .leasing import OperationLeasing
from .settings import Settings
from .steps import Steps

__all__ = ["FOREIGN", "Worker"]


class Worker:
    """Executes admitted operations exactly once per intent against their systems of record."""

    def __init__(
        self,
        runtime: Runtime,
        registry: ToolRegistry,
        settings: Settings,
        *,
        store: EventStore | None = None,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = RANDOM_IDS,
        retry: ConflictRetry = CONFLICT_RETRY,
    ) -> None:
        # Built at the composition root before the broker is connected: the runtime's store
        # (unless one is given) and its leases bucket read the connection when used.
        events = store if store is not None else ConnectedEventStore(runtime)
        topology = runtime.topology
        operations = Repository(
            events, aggregates.operations(topology), clock=clock, ids=ids, retry=retry
        )
        self.history = OperationHistory(operations, topology, clock=clock, ids=ids)
        self._topology = topology
        self._leasing = OperationLeasing(runtime, self.history, registry, settings, clock)
        dead_letters = OperationDeadLetters(
            events, self.history, topology, worker_id=settings.worker_id, clock=clock
        )
        self.steps = Steps(self.history, dead_letters, registry, settings, clock)
        self._callbacks = ProviderCallbacks(self.history, topology, registry, retry)

    async def execute(self, received: Received[OperationEvent]) -> None:
        """An operation event's work (policy), run by this worker: no work command is written.

        A first delivery of an admitted event that is the operation's first is the state to
        start from (`seeded`); anything else is read from the stream.
        """
        env = received.envelope
        if not env.operation_id:
            raise Poison("operation event without operation_id")
        commands = policy(env.event)
        if not commands:
            return
        subject = self._topology.operation_subject(env.session_id, env.operation_id)
        seed: Op | None = None
        # A redelivery means a worker had it (and may have written since): read the stream.
        if received.num_delivered == 1:
            first = appended_to_empty(received.headers, subject)
            found = seeded(env, stream_seq=received.stream_seq, first=first)
            if found is not None:
                seed = Op(found[0], found[1], subject, seed=True)
        for command in commands:
            await self._run(env.session_id, env.operation_id, command, seed)
            seed = None

    async def work(self, received: Received[WorkCommand]) -> None:
        """A work command (re-driven by an operator, or a copy): run it as `execute` would."""
        env = received.envelope
        if not env.operation_id:
            raise Poison("work command without operation_id")
        await self._run(env.session_id, env.operation_id, env.event, None)

    async def complete_from_callback(self, callback: CallbackResult, route: str) -> str:
        """Apply a verified provider callback once (`ProviderCallbacks.complete`)."""
        return await self._callbacks.complete(callback, route)

    async def _run(
        self, session_id: str, operation_id: str, command: WorkCommand, seed: Op | None
    ) -> None:
        """Run one operation to a terminal state (or until another worker owns it)."""
        leasing = self._leasing
        async with leasing.one_at_a_time(operation_id) as queued:
            lease, waited = await leasing.wait_for_lease(session_id, operation_id)
            if lease is None:
                # Settled by the worker that held it (it saw any new request when it reloaded).
                return
            held = [lease]
            renewer = asyncio.create_task(leasing.renew(held))
            terminal = False
            try:
                # After another run of it (here or elsewhere), its writes are in the stream,
                # not in the seed.
                op = seed if seed is not None and not (queued or waited) else None
                if op is None:
                    op = await self.history.load(session_id, operation_id)
                if op is None:
                    raise Poison(f"no events for operation {operation_id}")
                slot = await leasing.running_slot(op)
                if slot is not None:
                    held.append(slot)
                terminal = await self.steps.drive(op, command)
            finally:
                renewer.cancel()
                # A terminal operation's own lease is left to run out (its ttl): any later
                # copy of its work finds it terminal whether it waits on the lease or takes
                # it, so a delete would be one more KV round trip for nothing. The running
                # slot, which another operation waits for, and the lease of an operation
                # left unfinished (handed back, raced, an exception) are given up now.
                for held_lease in held[1:] if terminal else held:
                    await held_lease.release()
