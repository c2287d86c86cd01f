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

Over 400 lines because these six steps are one transaction's order and are read top to
bottom; the pure rules they apply are in `domain.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import http
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .callbacks import CallbackSender
from .domain import (
    COMPENSATED_STATUS,
    CompensateBody,
    CreateCommand,
    Decision,
    FaultEffect,
    Kind,
    Record,
    Scope,
    commit_pending,
    compensate,
    decide,
    fingerprint,
    ledger_key,
    new_record,
    new_record_id,
)
from .faults import FaultRegistry
from .metrics import Metrics
from .problems import PROBLEM_MEDIA_TYPE, ProblemError, encode, problem_body
from .settings import Settings
from .store import Store

log = logging.getLogger("holdline.sandbox_provider.engine")

JSON_MEDIA_TYPE = "application/json"
# A failed async commit (database trouble) is retried after this pause.
_COMMIT_RETRY_S = 1.0


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    outcome: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def media_type(self) -> str:
        return PROBLEM_MEDIA_TYPE if self.status >= 400 else JSON_MEDIA_TYPE


def _problem_reply(
    status: int,
    slug: str,
    title: str,
    detail: str,
    outcome: str,
    *,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    body = encode(problem_body(status, slug, title, detail, extra))
    return Reply(status, body, outcome, headers or {})


def _location(record_id: str | None) -> dict[str, str]:
    return {"Location": f"/v1/records/{record_id}"} if record_id else {}


def _goes_straight_through(effect: FaultEffect, business_code: str | None) -> bool:
    """Whether a request runs to its commit without waiting or failing first."""
    return not effect.latency_ms and effect.status is None and business_code is None


def _iso(timestamp: float) -> str:
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="milliseconds")


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
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._settings = settings
        self._faults = faults
        self._callbacks = callbacks
        self._metrics = metrics
        self._clock = clock
        # Guards check-then-claim of idempotency keys and every commit, so two concurrent
        # requests with one key can never both proceed.
        self._lock = asyncio.Lock()
        self._commit_tasks: set[asyncio.Task[None]] = set()
        # Set when the server starts shutting down: injected waits end at once instead of
        # being cancelled mid-request by the server's grace timeout.
        self._stopping = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        dropped = self._store.recover_in_flight()
        if dropped:
            log.info("dropped %d idempotency claims of requests that died before commit", dropped)
        for record in self._store.pending_records():
            self._schedule_commit(record)

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
        tasks = list(self._commit_tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ------------------------------------------------------------------ requests

    async def read_fault(self, resource: str, request_fault: FaultEffect) -> Reply | None:
        """The injected latency and status of a read of ``resource`` (faults added with
        ``reads``; a read has no effect to commit or time out after); None when the read goes
        ahead."""
        effect = self._faults.consume(resource, request_fault, read=True)
        if effect.latency_ms and await self._pause(effect.latency_ms / 1000.0):
            return _problem_reply(
                503, "shutting-down", "Service Unavailable", "the provider is shutting down",
                "fault", headers={"Retry-After": "1"},
            )
        return self._injected_status(effect) if effect.status is not None else None

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
            iso = _iso(now)
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
                status, body, "accepted" if want_async else "created", _location(record.id)
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
            result = compensate(current, _iso(self._clock()))
            if result.changed:
                self._store.update_record(result.record)
            queued = False
            if result.was_pending:
                # The async completion the caller waits for will report the cancellation.
                queued = self._callbacks.enqueue(result.record, self._clock()) is not None
            response = encode(result.record.view())
            self._store.finish_key(scope, key, 200, response, record_id)
            return _Committed(
                Reply(200, response, "compensated", _location(record_id)), callbacks=queued
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
                decision = decide(existing, request_fingerprint)
                if decision is Decision.PROCEED:
                    effect = self._faults.consume(resource, request_fault)
                    with self._store.transaction():
                        self._store.claim_key(scope, key, request_fingerprint, _iso(self._clock()))
                        if _goes_straight_through(effect, business_code):
                            # Nothing to wait for before the effect: the claim and the effect
                            # commit together, one durable write, and no other request can see
                            # the key in between (no await until the lock is released).
                            committed = commit()
                    claimed = committed is None
            if committed is not None and effect is not None:
                return await self._finish(committed, effect)
            if decision is Decision.MISMATCH:
                return _problem_reply(
                    422,
                    "idempotency-mismatch",
                    "Idempotency-Key reused with a different request",
                    f"key {key!r} was first used with a different {scope} request body",
                    "mismatch",
                )
            if decision is Decision.IN_FLIGHT:
                return _problem_reply(
                    409,
                    "idempotency-in-flight",
                    "Request with this Idempotency-Key is in flight",
                    f"a {scope} request with key {key!r} is still being processed; retry later",
                    "in_flight",
                    headers={"Retry-After": "1"},
                )
            if decision is Decision.REPLAY and existing is not None:
                return self._replay(existing.status_code, existing.response, existing.record_id)
        try:
            if effect is None:
                effect = self._faults.consume(resource, request_fault)
            if effect.latency_ms and await self._pause(effect.latency_ms / 1000.0):
                return _problem_reply(
                    503,
                    "shutting-down",
                    "Service Unavailable",
                    "the provider is shutting down; nothing was committed",
                    "fault",
                    headers={"Retry-After": "1"},
                )
            if effect.status is not None:
                return self._injected_status(effect)
            if business_code is not None:
                reply = _problem_reply(
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

    def _replay(self, status: int | None, body: bytes | None, record_id: str | None) -> Reply:
        if status is None or body is None:
            raise RuntimeError("finished idempotency key without a stored response")
        headers = {"Idempotent-Replayed": "true", **_location(record_id)}
        return Reply(status, body, "replayed", headers)

    def _injected_status(self, effect: FaultEffect) -> Reply:
        status = effect.status or 500
        headers: dict[str, str] = {}
        if effect.retry_after_s is not None and status in (429, 503):
            headers["Retry-After"] = str(math.ceil(effect.retry_after_s))
        try:
            title = http.HTTPStatus(status).phrase
        except ValueError:
            title = "Injected failure"
        return _problem_reply(
            status,
            "injected-fault",
            title,
            f"sandbox fault injection answered {status}; nothing was committed",
            "fault",
            headers=headers,
        )

    def _after_commit(self, committed: _Committed) -> None:
        if committed.effect_kind is not None:
            self._metrics.effects.labels(committed.effect_kind).inc()
            if committed.duplicates:
                self._metrics.duplicate_effects.labels(committed.effect_kind).inc(
                    committed.duplicates
                )
        if committed.schedule is not None:
            self._schedule_commit(committed.schedule)
        if committed.callbacks:
            self._callbacks.wake()

    # ------------------------------------------------------------------ async completion

    def _schedule_commit(self, record: Record) -> None:
        task = asyncio.create_task(self._commit_later(record), name=f"commit-{record.id}")
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)

    async def _commit_later(self, record: Record) -> None:
        due = record.commit_due if record.commit_due is not None else self._clock()
        await asyncio.sleep(max(0.0, due - self._clock()))
        while True:
            try:
                self._commit_pending(record.id)
            except Exception:
                log.exception("async commit of %s failed; retrying", record.id)
                await asyncio.sleep(_COMMIT_RETRY_S)
            else:
                return

    def _commit_pending(self, record_id: str) -> None:
        # No await inside: the event loop cannot interleave another commit or a cancel.
        now = self._clock()
        with self._store.transaction():
            current = self._store.get_record(record_id)
            committed = None if current is None else commit_pending(current, _iso(now))
            if committed is None:
                return  # cancelled or revoked before it committed: no effect
            self._store.update_record(committed)
            duplicates = self._store.add_effects(
                committed.kind,
                ledger_key(committed.idempotency_key, committed.reference, committed.id),
                committed.resource,
                1,
            )
            queued = self._callbacks.enqueue(committed, now) is not None
        self._metrics.effects.labels(committed.kind).inc()
        if duplicates:
            self._metrics.duplicate_effects.labels(committed.kind).inc(duplicates)
        if queued:
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
