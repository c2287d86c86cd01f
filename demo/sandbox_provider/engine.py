"""Executes mutations: idempotency bookkeeping, fault injection, commits and async completion.

Order for every mutating request that passed validation:

1. claim the idempotency key (or answer replay / 422 mismatch / 409 in flight);
2. consume matching faults; sleep the injected latency (before anything is committed);
3. an injected status answers with no effect and frees the key for a retry;
4. an injected business error is a final answer, stored under the key;
5. commit the effect, its ledger count and the stored response in one transaction (with
   the key's claim when nothing was injected: a request that neither waits nor fails
   before its effect claims and commits in one durable write, and no other request can
   run in between);
6. ``timeout_after_commit`` then hangs before answering: a retry meanwhile gets the
   stored result, which is what a client that timed out needs.

The pure rules these steps apply are in `idempotency.py`, `records.py` and `fault_rules.py`;
the answers in `replies.py`; async completion in `completion.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .callbacks import CallbackSender
from .completion import PendingCommits
from .fault_rules import FaultEffect
from .faults import FaultRegistry
from .idempotency import KeyDecision, decide_idempotency_key, fingerprint, ledger_key
from .metrics import Metrics
from .problems import ProblemError, encode
from .records import (
    COMPENSATED_STATUS,
    CreateCommand,
    Kind,
    Record,
    Scope,
    compensate_record,
    iso_at,
    new_record,
    new_record_id,
)
from .replies import Reply, injected_status, location, problem_reply, replayed
from .settings import Settings
from .store import Store
from .validation import CompensateBody

log = logging.getLogger("holdline.sandbox_provider.engine")


def _goes_straight_through(effect: FaultEffect, business_code: str | None) -> bool:
    """Whether a request runs to its commit without waiting or failing first."""
    return not effect.latency_ms and effect.status is None and business_code is None


@dataclass(slots=True)
class _Committed:
    reply: Reply
    effect_kind: Kind | None = None  # a real effect happened now
    schedule: Record | None = None  # a pending record to commit later
    callbacks: bool = False  # the outbox got a new entry
    duplicates: int = 0  # effects beyond the first for the same key, made now


class Engine:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        faults: FaultRegistry,
        callbacks: CallbackSender,
        metrics: Metrics,
        commits: PendingCommits,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._settings = settings
        self._faults = faults
        self._callbacks = callbacks
        self._metrics = metrics
        # Commits pending (async) records when due; built beside the engine, shared clock.
        self._commits = commits
        self._clock = clock
        # Guards check-then-claim of idempotency keys and every commit, so two concurrent
        # requests with one key can never both proceed.
        self._lock = asyncio.Lock()
        # Set when the server starts shutting down: injected waits end at once instead of
        # being cancelled mid-request by the server's grace timeout.
        self._stopping = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        dropped = self._store.recover_in_flight()
        if dropped:
            log.info("dropped %d idempotency claims of requests that died before commit", dropped)
        self._commits.start()

    def begin_shutdown(self) -> None:
        self._stopping.set()

    async def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds``; True when cut short by shutdown."""
        if seconds <= 0:
            return self._stopping.is_set()
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except TimeoutError:
            return False
        return True

    async def stop(self) -> None:
        self.begin_shutdown()
        await self._commits.stop()

    # ------------------------------------------------------------------ requests

    async def read_fault(self, resource: str, request_fault: FaultEffect) -> Reply | None:
        """The injected latency and status of a read of ``resource`` (faults added with
        ``reads``; a read has no effect to commit or time out after); None when the read goes
        ahead."""
        effect = self._faults.consume(resource, request_fault, read=True)
        if effect.latency_ms and await self._pause(effect.latency_ms / 1000.0):
            return problem_reply(
                503, "shutting-down", "Service Unavailable", "the provider is shutting down",
                "fault", headers={"Retry-After": "1"},
            )
        return injected_status(effect) if effect.status is not None else None

    async def create(
        self,
        command: CreateCommand,
        *,
        key: str | None,
        ignore_idempotency: bool,
        request_fault: FaultEffect,
        business_code: str | None,
        want_async: bool,
        callback_twice: bool,
    ) -> Reply:
        scope: Scope = command.kind
        claim_key = None if ignore_idempotency else key

        def commit() -> _Committed:
            now = self._clock()
            iso = iso_at(now)
            record = new_record(
                command,
                record_id=new_record_id(command.kind),
                idempotency_key=key,
                now_iso=iso,
                commit_due=now + self._settings.async_delay_s if want_async else None,
                callback_twice=callback_twice,
            )
            self._store.insert_record(record)
            duplicates = self._store.add_effects(
                command.kind,
                ledger_key(key, command.reference, record.id),
                record.resource,
                0 if want_async else 1,
            )
            status = 202 if want_async else 201
            body = encode(record.view())
            if claim_key is not None:
                self._store.finish_key(scope, claim_key, status, body, record.id)
            reply = Reply(
                status, body, "accepted" if want_async else "created", location(record.id)
            )
            if want_async:
                return _Committed(reply, schedule=record)
            return _Committed(reply, effect_kind=command.kind, duplicates=duplicates)

        return await self._execute(
            scope=scope,
            key=claim_key,
            request_fingerprint=fingerprint(scope, command.canonical),
            resource=command.resource,
            request_fault=request_fault,
            business_code=business_code,
            commit=commit,
        )

    async def compensate(
        self,
        kind: Kind,
        record_id: str,
        body: CompensateBody,
        *,
        key: str,
        request_fault: FaultEffect,
        business_code: str | None,
    ) -> Reply:
        if kind not in COMPENSATED_STATUS:
            raise ValueError(f"{kind} records cannot be compensated")
        scope: Scope = "access_revoke" if kind == "access" else "booking_cancel"
        record = self._store.get_record(record_id)
        # Another tenant's record is reported missing, not forbidden: ids do not leak across
        # tenants. Within a tenant any user (or the runtime acting for one) may compensate.
        if record is None or record.kind != kind or record.tenant_id != body.tenant_id:
            raise ProblemError(404, "not-found", "Not found", f"no {kind} record {record_id!r}")

        def commit() -> _Committed:
            current = self._store.get_record(record_id)
            if current is None:  # records are never deleted; kept for type narrowing
                raise RuntimeError(f"record {record_id} vanished")
            result = compensate_record(current, iso_at(self._clock()))
            if result.changed:
                self._store.update_record(result.record)
            queued = False
            if result.was_pending:
                # The async completion the caller waits for will report the cancellation.
                queued = self._callbacks.enqueue(result.record, self._clock()) is not None
            response = encode(result.record.view())
            self._store.finish_key(scope, key, 200, response, record_id)
            return _Committed(
                Reply(200, response, "compensated", location(record_id)), callbacks=queued
            )

        payload = {
            "record_id": record_id,
            "tenant_id": body.tenant_id,
            "user_id": body.user_id,
            "reference": body.reference,
        }
        return await self._execute(
            scope=scope,
            key=key,
            request_fingerprint=fingerprint(scope, payload),
            resource=record.resource,
            request_fault=request_fault,
            business_code=business_code,
            commit=commit,
        )

    async def _execute(
        self,
        *,
        scope: Scope,
        key: str | None,
        request_fingerprint: str,
        resource: str,
        request_fault: FaultEffect,
        business_code: str | None,
        commit: Callable[[], _Committed],
    ) -> Reply:
        claimed = False
        effect: FaultEffect | None = None
        committed: _Committed | None = None
        if key is not None:
            async with self._lock:
                existing = self._store.get_key(scope, key)
                decision = decide_idempotency_key(existing, request_fingerprint)
                if decision is KeyDecision.PROCEED:
                    effect = self._faults.consume(resource, request_fault)
                    with self._store.transaction():
                        claimed_at = iso_at(self._clock())
                        self._store.claim_key(scope, key, request_fingerprint, claimed_at)
                        if _goes_straight_through(effect, business_code):
                            # Nothing to wait for before the effect: the claim and the effect
                            # commit together, one durable write, and no other request can see
                            # the key in between (no await until the lock is released).
                            committed = commit()
                    claimed = committed is None
            if committed is not None and effect is not None:
                return await self._finish(committed, effect)
            if decision is KeyDecision.MISMATCH:
                return problem_reply(
                    422,
                    "idempotency-mismatch",
                    "Idempotency-Key reused with a different request",
                    f"key {key!r} was first used with a different {scope} request body",
                    "mismatch",
                )
            if decision is KeyDecision.IN_FLIGHT:
                return problem_reply(
                    409,
                    "idempotency-in-flight",
                    "Request with this Idempotency-Key is in flight",
                    f"a {scope} request with key {key!r} is still being processed; retry later",
                    "in_flight",
                    headers={"Retry-After": "1"},
                )
            if decision is KeyDecision.REPLAY and existing is not None:
                return replayed(existing.status_code, existing.response, existing.record_id)
        try:
            if effect is None:
                effect = self._faults.consume(resource, request_fault)
            if effect.latency_ms and await self._pause(effect.latency_ms / 1000.0):
                return problem_reply(
                    503,
                    "shutting-down",
                    "Service Unavailable",
                    "the provider is shutting down; nothing was committed",
                    "fault",
                    headers={"Retry-After": "1"},
                )
            if effect.status is not None:
                return injected_status(effect)
            if business_code is not None:
                reply = problem_reply(
                    400,
                    "business-error",
                    "Business rule rejected the request",
                    f"the system of record refused the {scope} request: {business_code}",
                    "business_error",
                    extra={"code": business_code},
                )
                if key is not None:
                    async with self._lock:
                        with self._store.transaction():
                            self._store.finish_key(scope, key, reply.status, reply.body, None)
                        claimed = False
                return reply
            async with self._lock:
                with self._store.transaction():
                    committed = commit()
                claimed = False
            return await self._finish(committed, effect)
        finally:
            if claimed and key is not None:
                # Failed, faulted or cancelled before commit: nothing happened, so a retry
                # with the same key must be allowed to run.
                self._store.release_key(scope, key)

    async def _finish(self, committed: _Committed, effect: FaultEffect) -> Reply:
        """After the commit: its follow-ups, then the answer (late, when the fault says so)."""
        self._after_commit(committed)
        if effect.timeout_after_commit:
            # Cut short by shutdown, the stored answer goes out early: it is true anyway.
            await self._pause(self._settings.hang_after_commit_s)
        return committed.reply

    def _after_commit(self, committed: _Committed) -> None:
        if committed.effect_kind is not None:
            self._metrics.effects.labels(committed.effect_kind).inc()
            if committed.duplicates:
                self._metrics.duplicate_effects.labels(committed.effect_kind).inc(
                    committed.duplicates
                )
        if committed.schedule is not None:
            self._commits.schedule(committed.schedule)
        if committed.callbacks:
            self._callbacks.wake()

    # ------------------------------------------------------------------ reads

    def lookup(
        self, *, key: str | None, reference: str | None, kind: Kind | None
    ) -> dict[str, Any]:
        records = self._store.find_records(key=key, reference=reference, kind=kind)
        result: dict[str, Any] = {"found": bool(records), "records": [r.view() for r in records]}
        if key is not None:
            # A claimed key without a record means "ask again": the request may still commit.
            result["in_flight"] = self._store.key_in_flight(key)
        return result
