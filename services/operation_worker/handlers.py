"""The worker's thin shell: load an operation, ask the pure decisions, append, repeat.

Two consumers and one HTTP route feed it, the consumers competing with every other worker:
- execute: `operation.admitted` / `operation.cancel_requested` on the operations stream,
  mapped by `policy` to the work they call for and run right there (an admitted first event
  is the operation's state: nothing is read before the first append);
- work: execute / cancel commands on the work queue (an operator's re-drive, a copy);
- callbacks: the provider's signed async completions.
Every append names the subject sequence it was decided from, so two writers never both win;
the loser reloads and decides again from the new truth.

About 600 lines: each piece of I/O the worker does (leases, slots, the executor's four
calls, the DLQ, callbacks) has its short method here; every decision is in `domain.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from libs import metrics
from libs.bus import (
    ConcurrencyConflict,
    Context,
    DeadLetter,
    Poison,
    Received,
    Topology,
    append,
    appended_to_empty,
    load,
)
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.crash import crash_point
from libs.domain import OperationState, OpStatus, operation
from libs.events import (
    OPERATIONS,
    OperationAttempted,
    OperationDeadLettered,
    OperationEvent,
    OperationRetryScheduled,
    OperationStarted,
    OperationUnknown,
    WorkCommand,
)
from libs.service import Runtime
from libs.tools import CallbackResult, OperationCall, ToolDeclaration, ToolRegistry

from .domain import (
    Attempt,
    AwaitCompletion,
    CancelAtProvider,
    DeadLetterIt,
    Emit,
    PollProvider,
    Reconcile,
    RetryBudget,
    Stop,
    Wait,
    after_attempt_budgeted,
    after_cancel,
    after_poll,
    after_reconcile,
    attempted,
    await_completion,
    completion_events,
    next_step,
    policy,
    seeded,
    started,
)
from .lease import Lease, acquire, expires_in
from .settings import Settings

log = logging.getLogger(__name__)

# An operation id is one subject token: anything else in a callback names no operation.
_OPERATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


# A callback, validly signed, about an operation that another executor runs.
FOREIGN = "foreign_operation"


class _Stale(Exception):
    """The operation changed under us: reload and decide again."""


@dataclass
class _Op:
    """An operation as loaded, with the sequence to append after."""

    state: OperationState
    seq: int
    subject: str
    # Folded from the delivered admitted event, not read from the stream: true only until
    # the first guarded append says so (see `_step`).
    seed: bool = False


class Worker:
    """Executes admitted operations exactly once per intent against their systems of record."""

    def __init__(
        self,
        runtime: Runtime,
        registry: ToolRegistry,
        settings: Settings,
        *,
        clock: Clock = SYSTEM_CLOCK,
        ids: Ids = RANDOM_IDS,
    ) -> None:
        # Built at the composition root before the broker is connected: the connection and
        # the leases bucket are read from the runtime when used.
        self._runtime = runtime
        self._topology: Topology = runtime.topology
        self._registry = registry
        self._settings = settings
        self._timings = settings.bus.timings
        self._clock = clock
        self._ids = ids
        self._budget = RetryBudget(settings.retry_budget_ratio, settings.retry_budget_min)
        # Jitter only, never security: a plain PRNG is the right tool.
        self._rand = random.Random()  # noqa: S311
        # Per operation id: the lock of the run in hand, and how many runs hold or want it.
        self._in_hand: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, int] = {}

    @property
    def _js(self) -> JetStreamContext:
        return self._runtime.jetstream

    @property
    def _leases(self) -> KeyValue:
        return self._runtime.bucket("leases")

    # -- loading and appending -----------------------------------------------------------
    async def _load(self, session_id: str, operation_id: str) -> _Op | None:
        subject = self._topology.operation_subject(session_id, operation_id)
        loaded = await load(
            self._js,
            self._topology.stream_name(Context.OPERATIONS),
            subject,
            OPERATIONS,
            operation.evolve,
            timings=self._timings,
        )
        if loaded.state is None:
            return None
        return _Op(loaded.state, loaded.last_seq, subject)

    async def _append(self, op: _Op, *events: OperationEvent) -> _Op:
        """Append events in order after op.seq; raises _Stale if someone wrote in between."""
        state, seq = op.state, op.seq
        for event in events:
            env = operation.envelope_for(
                state,
                event,
                event_id=self._ids.new("ev"),
                now=self._clock.now(),
            )
            try:
                ack = await append(
                    self._js, OPERATIONS, op.subject, env, expected_last_subject_seq=seq,
                    timings=self._timings,
                )
            except ConcurrencyConflict:
                raise _Stale from None
            state, seq = operation.evolve(state, env), ack.seq
            metrics.EVENTS_PUBLISHED.labels("operations").inc()
            self._observe(state, event)
        return _Op(state, seq, op.subject)

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

    def _timeout(self, declaration: ToolDeclaration) -> float:
        return declaration.attempt_timeout_s * self._settings.timeout_scale

    def _call(self, state: OperationState) -> OperationCall:
        return OperationCall(
            operation_id=state.operation_id,
            session_id=state.session_id,
            tool=state.tool,
            arguments=state.arguments,
            tenant_id=state.tenant_id or "",
            user_id=state.user_id or "",
            # The operation id is the key: stable across retries, redeliveries and workers.
            idempotency_key=state.operation_id,
            reference=f"{state.session_id}/{state.operation_id}",
            result=state.result,
            provider_ref=state.provider_ref,
        )

    # -- execution -------------------------------------------------------------------------
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
        seed: _Op | None = None
        # A redelivery means a worker had it (and may have written since): read the stream.
        if received.num_delivered == 1:
            first = appended_to_empty(received.headers, subject)
            found = seeded(env, stream_seq=received.stream_seq, first=first)
            if found is not None:
                seed = _Op(found[0], found[1], subject, seed=True)
        for command in commands:
            await self._run(env.session_id, env.operation_id, command, seed)
            seed = None

    async def work(self, received: Received[WorkCommand]) -> None:
        """A work command (re-driven by an operator, or a copy): run it as `execute` would."""
        env = received.envelope
        if not env.operation_id:
            raise Poison("work command without operation_id")
        await self._run(env.session_id, env.operation_id, env.event, None)

    async def _run(
        self, session_id: str, operation_id: str, command: WorkCommand, seed: _Op | None
    ) -> None:
        """Run one operation to a terminal state (or until another worker owns it)."""
        async with self._one_at_a_time(operation_id) as queued:
            lease, waited = await self._wait_for_lease(session_id, operation_id)
            if lease is None:
                # Settled by the worker that held it (it saw any new request when it reloaded).
                return
            held = [lease]
            renewer = asyncio.create_task(self._renew(held))
            terminal = False
            try:
                # After another run of it (here or elsewhere), its writes are in the stream,
                # not in the seed.
                op = seed if seed is not None and not (queued or waited) else None
                if op is None:
                    op = await self._load(session_id, operation_id)
                if op is None:
                    raise Poison(f"no events for operation {operation_id}")
                slot = await self._running_slot(op)
                if slot is not None:
                    held.append(slot)
                terminal = await self._drive(op, command)
            finally:
                renewer.cancel()
                # A terminal operation's own lease is left to run out (its ttl): any later
                # copy of its work finds it terminal whether it waits on the lease or takes
                # it, so a delete would be one more KV round trip for nothing. The running
                # slot, which another operation waits for, and the lease of an operation
                # left unfinished (handed back, raced, an exception) are given up now.
                for held_lease in held[1:] if terminal else held:
                    await held_lease.release()

    @contextlib.asynccontextmanager
    async def _one_at_a_time(self, operation_id: str) -> AsyncIterator[bool]:
        """One run per operation in this worker, whichever consumer brought it; yields
        whether another run was in hand first.

        The lease keeps other workers out but lets its own holder in again, and the two
        consumers (operation events, work commands) each order only their own messages.
        """
        lock = self._in_hand.get(operation_id)
        if lock is None:
            lock = self._in_hand[operation_id] = asyncio.Lock()
        queued = lock.locked()
        self._queued[operation_id] = self._queued.get(operation_id, 0) + 1
        try:
            async with lock:
                yield queued
        finally:
            self._queued[operation_id] -= 1
            if self._queued[operation_id] == 0:
                # Nobody else waits on this operation here: forget its lock.
                del self._queued[operation_id]
                del self._in_hand[operation_id]

    async def _wait_for_lease(
        self, session_id: str, operation_id: str
    ) -> tuple[Lease | None, bool]:
        """The operation's lease once its holder lets go (None once the operation is
        terminal), and whether another holder had it first.

        Acknowledging this message while another worker holds the lease would lose the work
        if that worker then fails: its own delivery may already be acknowledged.
        """
        owner, ttl = self._settings.worker_id, self._settings.lease_ttl_s
        waited = False
        # Bounded by the holder: it finishes, or stops renewing and the lease expires.
        while (lease := await acquire(self._leases, operation_id, owner, ttl, self._clock)) is None:
            waited = True
            op = await self._load(session_id, operation_id)
            if op is None or op.state.terminal:
                return None, waited
            # Wake right at the holder's expiry (a dead worker's operation is taken over
            # then, not up to a poll later); a live holder has renewed it by that time.
            left = await expires_in(self._leases, operation_id, self._clock)
            poll = self._settings.poll_interval_s * 4
            await asyncio.sleep(poll if left is None else min(poll, max(0.02, left + 0.01)))
        return lease, waited

    async def _running_slot(self, op: _Op) -> Lease | None:
        """For tools with a running limit: wait (queued, admitted) for a free slot."""
        session_id, operation_id = op.state.session_id, op.state.operation_id
        if op.state.terminal:
            return None
        limit = self._registry.tool(op.state.tool).limits.running
        if limit is None:
            return None
        owner, ttl = f"{self._settings.worker_id}/{operation_id}", self._settings.lease_ttl_s
        while True:
            for i in range(limit):
                slot = await acquire(
                    self._leases, f"slot.{op.state.tool}.{i}", owner, ttl, self._clock
                )
                if slot is not None:
                    return slot
            fresh = await self._load(session_id, operation_id)
            if (
                fresh is None
                or fresh.state.terminal
                or fresh.state.status is OpStatus.CANCEL_REQUESTED
            ):
                return None
            if fresh.state.deadline_at is not None and self._clock.now() >= fresh.state.deadline_at:
                return None
            await asyncio.sleep(self._settings.poll_interval_s)

    async def _renew(self, leases: list[Lease]) -> None:
        """Heartbeat the held leases until cancelled.

        The lease is short (a dead worker's operation is taken over seconds later), so a
        renewal that fails on a broker hiccup (a reconnect, an election) must not end the
        loop: the next one half a second later keeps the lease, well inside its ttl.
        """
        while True:
            await asyncio.sleep(self._settings.lease_renew_s)
            for lease in leases:
                try:
                    await lease.renew()
                except Exception as exc:  # noqa: BLE001 - keep heartbeating through broker errors
                    log.info("lease renewal failed (%r); trying again", exc)

    async def _drive(self, first: _Op, command: WorkCommand) -> bool:
        """Run the operation until this worker is done with it; True if it is then terminal."""
        session_id, operation_id = first.state.session_id, first.state.operation_id
        op: _Op | None = first
        for _ in range(10_000):
            if op is None:
                raise Poison(f"no events for operation {operation_id}")
            if op.state.terminal:
                return True
            try:
                left = await self._step(op, command)
            except _Stale:
                left = None
            if left is not None:
                return left.state.terminal
            # Someone (or this worker) wrote since: decide again from the stream's truth.
            op = await self._load(session_id, operation_id)
        raise RuntimeError(f"operation {operation_id} did not settle")

    async def _step(self, op: _Op, command: WorkCommand) -> _Op | None:
        """One decision and its execution.

        The operation as this worker leaves it once done with it (the state its last append
        folded, so the caller knows without a reload whether it is terminal), or None to
        reload and decide again.
        """
        declaration = self._registry.tool(op.state.tool)
        step = next_step(op.state, command, self._clock.now())
        if op.seed and not isinstance(step, Attempt | Emit):
            # A seed is trusted only by a step whose first effect is a guarded append (which
            # fails if the seed is stale); any other (a dead letter) reads the stream first.
            return None
        match step:
            case Stop():
                return op
            case DeadLetterIt(reason=reason):
                # Not terminal (only unresolved operations get here): the lease is released.
                await self._dead_letter(op, reason)
                return op
            case Emit():
                return await self._emit(op, step)
            case Wait(until=until):
                await self._sleep_until(op, until)
                return None
            case Attempt():
                return await self._attempt(op, declaration)
            case CancelAtProvider():
                return await self._cancel(op, declaration)
            case Reconcile():
                return await self._reconcile(op, declaration)
            case AwaitCompletion():
                return await self._await_async(op, declaration)

    async def _emit(self, op: _Op, step: Emit | Wait) -> _Op | None:
        """Carry out a decider's Emit (append) or Wait (sleep); the operation once done."""
        if isinstance(step, Wait):
            await self._sleep_until(op, step.until)
            return None
        op = await self._append(op, *step.events)
        return op if step.done else None

    @property
    def _recheck_s(self) -> float:
        return self._settings.poll_interval_s * 4

    async def _attempt(self, op: _Op, declaration: ToolDeclaration) -> _Op | None:
        opening = started(op.state, self._settings.worker_id)
        op = await self._append(op, opening)
        # The attempt's number is the one its `operation.started` opened (attempts so far
        # + 1): the state counts an attempt only once its outcome is recorded.
        attempt = opening.attempt
        crash_point("worker.after_started")
        if attempt == 1:
            self._budget.record_first()
        executor = self._registry.executor_for(op.state.tool)
        result = await executor.execute(self._call(op.state), timeout_s=self._timeout(declaration))
        if result.outcome == "success":
            crash_point("worker.after_provider_commit")
        before = op.state
        record = attempted(attempt, result)
        if record is not None:
            op = await self._append(op, record)
            crash_point("worker.after_attempt_recorded")
        # Decided once the attempt is recorded, so a retry's time counts from the event that
        # schedules it (a Retry-After is never shortened by the append's wait for a core).
        decision = after_attempt_budgeted(
            before,
            declaration,
            result,
            now=self._clock.now(),
            draw=self._rand.random(),
            budget=self._budget,
            backoff_scale=self._settings.backoff_scale,
        )
        op = await self._append(op, *decision.events)
        if op.state.status is OpStatus.FAILED_FINAL:
            await self._dead_letter(op, op.state.failure or "failed")
        return op if op.state.terminal else None

    async def _sleep_until(self, op: _Op, when: datetime) -> None:
        """Wait for a retry, waking early if the operation changes (a cancel, a callback)."""
        deadline = time.monotonic() + max(0.0, (when - self._clock.now()).total_seconds())
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, self._settings.poll_interval_s))
            fresh = await self._load(op.state.session_id, op.state.operation_id)
            if fresh is None or fresh.seq != op.seq:
                return

    async def _await_async(self, op: _Op, declaration: ToolDeclaration) -> _Op | None:
        """Wait for the provider's callback; poll once it is overdue."""
        step = await_completion(
            op.state,
            self._clock.now(),
            progress_after_s=self._settings.progress_after_s,
            callback_overdue_s=self._settings.callback_overdue_s,
            recheck_s=self._recheck_s,
        )
        if not isinstance(step, PollProvider):
            return await self._emit(op, step)
        executor = self._registry.executor_for(op.state.tool)
        found = await executor.poll(self._call(op.state), timeout_s=self._timeout(declaration))
        return await self._emit(
            op, after_poll(found, now=self._clock.now(), recheck_s=self._recheck_s)
        )

    async def _reconcile(self, op: _Op, declaration: ToolDeclaration) -> _Op | None:
        """UNKNOWN: ask the system of record before anything is sent again."""
        executor = self._registry.executor_for(op.state.tool)
        found = await executor.lookup(self._call(op.state), timeout_s=self._timeout(declaration))
        return await self._emit(
            op, after_reconcile(op.state, found, now=self._clock.now(), recheck_s=self._recheck_s)
        )

    async def _cancel(self, op: _Op, declaration: ToolDeclaration) -> _Op | None:
        """Cancel for real, and only report it once the state is confirmed."""
        executor = self._registry.executor_for(op.state.tool)
        call = self._call(op.state)
        found = await (
            executor.cancel(call, timeout_s=self._timeout(declaration))
            if declaration.cancellable
            else executor.lookup(call, timeout_s=self._timeout(declaration))
        )
        decision = after_cancel(
            op.state, declaration, found, now=self._clock.now(), recheck_s=self._recheck_s
        )
        return await self._emit(op, decision)

    async def _dead_letter(self, op: _Op, reason: str) -> None:
        """Terminal failure or an unresolvable operation: the DLQ gets its full history."""
        history = await load(
            self._js,
            self._topology.stream_name(Context.OPERATIONS),
            op.subject,
            OPERATIONS,
            operation.evolve,
            timings=self._timings,
        )
        record = DeadLetter(
            source_stream=self._topology.stream_name(Context.OPERATIONS),
            source_subject=op.subject,
            source_seq=op.seq,
            consumer=f"operation-worker/{self._settings.worker_id}",
            num_delivered=op.state.attempts,
            reason=reason,
            error=op.state.failure or "",
            payload=msgspec.json.encode([OPERATIONS.encode(e).decode() for e in history.events]),
            dead_lettered_at=self._clock.now(),
        )
        subject = self._topology.dlq_subject(Context.OPERATIONS, op.state.session_id)
        await self._js.publish(
            subject,
            msgspec.json.encode(record),
            headers={"Nats-Msg-Id": f"dlq:{op.state.operation_id}:{op.seq}"},
        )
        metrics.DEAD_LETTERS.labels("operations", reason.split(":", maxsplit=1)[0][:40]).inc()
        if not op.state.dead_lettered:
            try:
                await self._append(op, OperationDeadLettered(reason=reason))
            except _Stale:
                log.info(
                    "dead-letter mark for %s raced; the record is stored", op.state.operation_id
                )

    # -- callbacks ---------------------------------------------------------------------
    async def complete_from_callback(self, callback: CallbackResult, route: str) -> str:
        """Apply a verified provider callback once; a duplicate or late one changes nothing.

        Only the executor that runs the operation's tool may complete it: a provider's valid
        signature says nothing about another provider's operations.
        """
        operation_id, found = callback.operation_id, callback.found
        session_id = callback.session_id or await self._session_of(operation_id)
        if session_id is None:
            return "unknown_operation"
        for _ in range(10):
            op = await self._load(session_id, operation_id)
            if op is None or op.state.operation_id != operation_id:
                return "unknown_operation"
            if not self._registry.completes(route, op.state.tool):
                return FOREIGN
            if op.state.terminal:
                return "already_terminal"
            cancel = op.state.status is OpStatus.CANCEL_REQUESTED
            events = completion_events(found, "callback", cancel_requested=cancel)
            if not events:
                return "still_pending"
            try:
                await self._append(op, *events)
            except _Stale:
                continue
            return "applied"
        return "raced"

    async def _session_of(self, operation_id: str) -> str | None:
        """The session of an operation known only by id (a provider that echoes only our key)."""
        if not _OPERATION_ID.match(operation_id):
            return None
        loaded = await load(
            self._js,
            self._topology.stream_name(Context.OPERATIONS),
            self._topology.operation_anywhere(operation_id),
            OPERATIONS,
            operation.evolve,
            timings=self._timings,
        )
        return loaded.state.session_id if loaded.state is not None else None
