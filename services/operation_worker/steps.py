"""One step of an operation: ask the pure decisions (`domain.py`), call the executor, append.

Each piece of I/O a step does (the executor's four calls, a wait, a dead letter) has its
short method here; every decision is in `domain.py`.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import datetime

from libs.bus import Poison
from libs.clock import Clock
from libs.crash import crash_point
from libs.domain import OperationState, OpStatus
from libs.events import WorkCommand
from libs.tools import OperationCall, ToolDeclaration, ToolRegistry

from .dead_letters import OperationDeadLetters
from .domain import RetryBudget
from .history import Op, OperationHistory, Stale
from .settings import Settings
from .stepping import (
    Attempt,
    AwaitCompletion,
    CancelAtProvider,
    DeadLetterIt,
    Emit,
    PollProvider,
    Reconcile,
    Stop,
    Wait,
    after_attempt_budgeted,
    after_cancel,
    after_poll,
    after_reconcile,
    attempted,
    await_completion,
    next_step,
    started,
)


class Steps:
    """Carries an operation step by step until this worker is done with it."""

    def __init__(
        self,
        history: OperationHistory,
        dead_letters: OperationDeadLetters,
        registry: ToolRegistry,
        settings: Settings,
        clock: Clock,
    ) -> None:
        self._history = history
        self.dead_letters = dead_letters
        self._registry = registry
        self._settings = settings
        self._clock = clock
        self._budget = RetryBudget(settings.retry_budget_ratio, settings.retry_budget_min)
        # Jitter only, never security: a plain PRNG is the right tool.
        self._rand = random.Random()  # noqa: S311

    async def drive(self, first: Op, command: WorkCommand) -> bool:
        """Run the operation until this worker is done with it; True if it is then terminal."""
        session_id, operation_id = first.state.session_id, first.state.operation_id
        op: Op | None = first
        for _ in range(10_000):
            if op is None:
                raise Poison(f"no events for operation {operation_id}")
            if op.state.terminal:
                return True
            try:
                left = await self.step(op, command)
            except Stale:
                left = None
            if left is not None:
                return left.state.terminal
            # Someone (or this worker) wrote since: decide again from the stream's truth.
            op = await self._history.load(session_id, operation_id)
        raise RuntimeError(f"operation {operation_id} did not settle")

    async def step(self, op: Op, command: WorkCommand) -> Op | None:
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
                await self.dead_letters.dead_letter(op, reason)
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

    async def _emit(self, op: Op, step: Emit | Wait) -> Op | None:
        """Carry out a decider's Emit (append) or Wait (sleep); the operation once done."""
        if isinstance(step, Wait):
            await self._sleep_until(op, step.until)
            return None
        op = await self._history.append(op, *step.events)
        return op if step.done else None

    @property
    def _recheck_s(self) -> float:
        return self._settings.poll_interval_s * 4

    def _timeout(self, declaration: ToolDeclaration) -> float:
        return declaration.attempt_timeout_s * self._settings.timeout_scale

    async def _attempt(self, op: Op, declaration: ToolDeclaration) -> Op | None:
        opening = started(op.state, self._settings.worker_id)
        op = await self._history.append(op, opening)
        # The attempt's number is the one its `operation.started` opened (attempts so far
        # + 1): the state counts an attempt only once its outcome is recorded.
        attempt = opening.attempt
        crash_point("worker.after_started")
        if attempt == 1:
            self._budget.record_first()
        executor = self._registry.executor_for(op.state.tool)
        result = await executor.execute(call_of(op.state), timeout_s=self._timeout(declaration))
        if result.outcome == "success":
            crash_point("worker.after_provider_commit")
        before = op.state
        record = attempted(attempt, result)
        if record is not None:
            op = await self._history.append(op, record)
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
        op = await self._history.append(op, *decision.events)
        if op.state.status is OpStatus.FAILED_FINAL:
            await self.dead_letters.dead_letter(op, op.state.failure or "failed")
        return op if op.state.terminal else None

    async def _sleep_until(self, op: Op, when: datetime) -> None:
        """Wait for a retry, waking early if the operation changes (a cancel, a callback)."""
        deadline = time.monotonic() + max(0.0, (when - self._clock.now()).total_seconds())
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(left, self._settings.poll_interval_s))
            fresh = await self._history.load(op.state.session_id, op.state.operation_id)
            if fresh is None or fresh.seq != op.seq:
                return

    async def _await_async(self, op: Op, declaration: ToolDeclaration) -> Op | None:
        """Wait for the provider's callback; poll once it is overdue."""
        step = await_completion(
            op.state,
            self._clock.now(),
            progress_after_s=self._settings.progress_after_s,
            # A polled tool's completion never comes by callback: poll from the start.
            callback_overdue_s=0.0 if declaration.polled else self._settings.callback_overdue_s,
            recheck_s=self._recheck_s,
        )
        if not isinstance(step, PollProvider):
            return await self._emit(op, step)
        executor = self._registry.executor_for(op.state.tool)
        found = await executor.poll(call_of(op.state), timeout_s=self._timeout(declaration))
        last = op.state.last_progress if declaration.polled else None
        return await self._emit(
            op,
            after_poll(found, now=self._clock.now(), recheck_s=self._recheck_s, last_progress=last),
        )

    async def _reconcile(self, op: Op, declaration: ToolDeclaration) -> Op | None:
        """UNKNOWN: ask the system of record before anything is sent again."""
        executor = self._registry.executor_for(op.state.tool)
        found = await executor.lookup(call_of(op.state), timeout_s=self._timeout(declaration))
        return await self._emit(
            op, after_reconcile(op.state, found, now=self._clock.now(), recheck_s=self._recheck_s)
        )

    async def _cancel(self, op: Op, declaration: ToolDeclaration) -> Op | None:
        """Cancel for real, and only report it once the state is confirmed."""
        executor = self._registry.executor_for(op.state.tool)
        call = call_of(op.state)
        found = await (
            executor.cancel(call, timeout_s=self._timeout(declaration))
            if declaration.cancellable
            else executor.lookup(call, timeout_s=self._timeout(declaration))
        )
        decision = after_cancel(
            op.state, declaration, found, now=self._clock.now(), recheck_s=self._recheck_s
        )
        return await self._emit(op, decision)


def call_of(state: OperationState) -> OperationCall:
    """What the executor is asked with: the operation id is the idempotency key."""
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
