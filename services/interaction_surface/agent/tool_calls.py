"""`POST /v1/sessions/{id}/tool-calls`: an external model's calls through the chat turn's
admission (validation, authorisation, limits, duplicates by intent, supersession,
confirmation, backpressure), as one batch per request.

Bad input is refused whole before anything is written (problem+json): an unknown tool,
arguments that are not a JSON object or do not match the tool's published schema, a
`tool_call_id` over 256 bytes or repeated within the request. What admission itself
refuses (another user's account, a business limit, backpressure) is an honest outcome of
the batch, recorded as `operation.rejected` like any chat turn's.

Idempotency: each `tool_call_id` is a create-once key in the `turns` bucket
(`<session>.tc.<sha256>`), holding `pending` and then its answer; a repeat returns that
answer and admits nothing. The intent keys still decide what a *new* id for the same thing
does (the tool's duplicate policy).

Confirmation arrives as a call of the built-in `confirm_operation` tool
(`{operation_id, confirmed}`), offered with the tools whenever one of them may need a yes:
a model calls a tool more reliably than it repeats a magic phrase, and the operation id
says exactly which request the user answered. `user_text` is recorded with the batch, never
parsed.

The request is all-or-nothing across validation (`tool_formats.py`), admission and the
idempotency record (here); what the model is told is worded in `tool_outputs.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from typing import Any

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from libs import metrics
from libs.admission import Admission, AdmissionOutcome, ToolCall, TurnContext
from libs.domain import SessionState
from libs.events import ToolCallsReceived
from libs.tools import Caller, ToolRegistry

from ..core.answers import WriteBehind, claim_verdict
from ..core.session_locks import SessionLocks
from .tool_formats import (
    ConfirmArgs,
    Prepared,
    StillAnswering,
    ToolCallsBody,
    offered,
    prepare,
)
from .tool_outputs import confirm_line, labels, operation_ref, output_text

log = logging.getLogger(__name__)

# Pauses between the attempts to store an answer (bounded: the last failure is logged).
_STORE_BACKOFF_S = (0.1, 0.3, 1.0, 3.0, 0.0)

# --------------------------------------------------------------------------- the request


class ToolCalls:
    """Admits tool-call batches; one instance per surface process."""

    def __init__(self, surface: Any, admission: Admission, registry: ToolRegistry) -> None:
        self._surface = surface
        self._admission = admission
        self.registry = registry
        self._locks = SessionLocks()
        self._answers = WriteBehind("tool call answers")

    def _key(self, session_id: str, tool_call_id: str) -> str:
        return f"{session_id}.tc.{hashlib.sha256(tool_call_id.encode()).hexdigest()[:40]}"

    async def handle(self, session: SessionState, body: ToolCallsBody) -> dict[str, Any]:
        """Admit the new calls as one batch; repeated ids get their stored answers."""
        started = time.perf_counter()
        caller = Caller(
            tenant_id=session.tenant_id, user_id=session.user_id, agent=session.agent
        )
        prepared = prepare(body, offered(self.registry, session.agent), caller)
        kv = self._surface.runtime.bucket("turns")
        # The agent's own turn id when it gives one: the batch and its closing carry it.
        turn_id = body.turn_id or self._surface.ids.new("turn")
        pending = json.dumps(
            {"state": "pending", "turn_id": turn_id, "at": time.time()}
        ).encode()
        keys = [self._key(session.session_id, p.tool_call_id) for p in prepared]
        fresh: list[Prepared] = []
        repeats: dict[str, str] = {}
        for call, key in zip(prepared, keys, strict=True):
            with metrics.turn_phase("tool_calls_claim"):
                claimed = await self._claim(kv, key, pending)
            if claimed:
                fresh.append(call)
            else:
                repeats[call.tool_call_id] = key
        answers: dict[str, dict[str, Any]] = {}
        batch_id: str | None = None
        if fresh:
            try:
                batch_id, answers = await self._admit(session, body, fresh, turn_id)
            except BaseException:
                # Nothing answered: a retry with the same ids goes through admission again
                # (where the intent keys map it onto anything already admitted).
                for call in fresh:
                    with contextlib.suppress(Exception):
                        await kv.delete(self._key(session.session_id, call.tool_call_id))
                raise
            # Stored after the answer is sent: a repeat meanwhile waits on the pending claim,
            # and a crash before it is covered by the stale-claim takeover.
            self._store(
                kv, session.session_id, fresh, turn_id=turn_id, batch_id=batch_id, answers=answers
            )
        first: dict[str, Any] | None = None
        for call_id, key in repeats.items():
            stored_answer = await self._stored(kv, key)
            first = first or stored_answer
            answers[call_id] = stored_answer["result"]
        if not fresh and first is not None:
            turn_id, batch_id = first["turn_id"], first["batch_id"]
        metrics.ACCEPTANCE.observe(time.perf_counter() - started)
        return {
            "turn_id": turn_id,
            "batch_id": batch_id,
            "results": [answers[p.tool_call_id] for p in prepared],
        }

    def _store(
        self,
        kv: Any,
        session_id: str,
        calls: list[Prepared],
        *,
        turn_id: str,
        batch_id: str | None,
        answers: dict[str, dict[str, Any]],
    ) -> None:
        async def put(call: Prepared) -> None:
            key = self._key(session_id, call.tool_call_id)
            value = json.dumps({
                "state": "answered", "turn_id": turn_id, "batch_id": batch_id,
                "result": answers[call.tool_call_id],
            }).encode()
            # A put is idempotent, so a failed one (a timeout on a loaded broker) is tried
            # again: left pending, a repeat would wait a whole turn timeout for a takeover.
            for attempt, pause in enumerate(_STORE_BACKOFF_S):
                try:
                    await kv.put(key, value)
                except Exception:  # any failed put is tried again; the last failure is raised
                    if attempt == len(_STORE_BACKOFF_S) - 1:
                        raise
                    log.warning("tool call answer %s not stored yet; trying again", key)
                    await asyncio.sleep(pause)
                else:
                    return

        async def store() -> None:
            with metrics.turn_phase("tool_calls_store"):
                await asyncio.gather(*(put(call) for call in calls))

        self._answers.start(store(), name=f"store-tool-calls-{turn_id}")

    async def flush(self) -> None:
        """Wait for the answers still being stored (at shutdown, before the bus closes)."""
        await self._answers.flush()

    async def _claim(self, kv: Any, key: str, pending: bytes) -> bool:
        """Take the id for this request; a pending claim older than a turn's timeout was left
        by a surface that died mid-request, and is taken over (admission's intent keys then
        map its calls onto whatever it had already admitted)."""
        try:
            await kv.create(key, pending)
        except KeyWrongLastSequenceError:
            pass
        else:
            return True
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:
            return await self._claim(kv, key, pending)
        stored = json.loads(entry.value or b"{}")
        if claim_verdict(stored, time.time(), self._surface.settings.turn_timeout_s) != "take":
            return False
        try:
            await kv.update(key, pending, last=entry.revision)
        except KeyWrongLastSequenceError:
            return False
        return True

    async def _stored(self, kv: Any, key: str) -> dict[str, Any]:
        deadline = time.monotonic() + self._surface.settings.turn_wait_s
        while True:
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                entry = None
            if entry is not None and entry.value:
                stored: dict[str, Any] = json.loads(entry.value)
                if stored.get("state") == "answered":
                    return stored
            if time.monotonic() >= deadline:
                raise StillAnswering(key)
            await asyncio.sleep(0.05)

    async def _admit(
        self,
        session: SessionState,
        body: ToolCallsBody,
        calls: list[Prepared],
        turn_id: str,
    ) -> tuple[str | None, dict[str, dict[str, Any]]]:
        session_id = session.session_id
        async with self._locks.hold(session_id):
            with metrics.turn_phase("tool_calls_received"):
                await self._record(session, body, calls, turn_id)
            with metrics.turn_phase("tool_calls_admission"):
                return await self._run(session, calls, turn_id)

    async def _record(
        self, session: SessionState, body: ToolCallsBody, calls: list[Prepared], turn_id: str
    ) -> None:
        await self._surface.append_interaction(
            session.session_id,
            ToolCallsReceived(
                tool_call_ids=tuple(c.tool_call_id for c in calls), user_text=body.user_text
            ),
            expect=False,
            turn_id=turn_id,
            response_id=body.response_id,
            agent=session.agent,
        )

    async def _run(
        self, session: SessionState, calls: list[Prepared], turn_id: str
    ) -> tuple[str | None, dict[str, dict[str, Any]]]:
        ctx = TurnContext(
            session_id=session.session_id,
            turn_id=turn_id,
            tenant_id=session.tenant_id,
            user_id=session.user_id,
            agent=session.agent,
        )
        answers: dict[str, dict[str, Any]] = {}
        for call in calls:
            if call.declaration is None:
                args = msgspec.convert(call.arguments, ConfirmArgs)
                outcome = await self._confirm(ctx, args)
                answers[call.tool_call_id] = {
                    "tool_call_id": call.tool_call_id,
                    "output": confirm_line(outcome, args.confirmed),
                    "operations": [operation_ref(outcome)] if outcome.tool else [],
                }
        tools = [c for c in calls if c.declaration is not None]
        if not tools:
            return None, answers
        admitted = await self._admission.admit(
            ctx, [ToolCall(c.name, dict(c.arguments), c.tool_call_id) for c in tools]
        )
        outcomes = list(admitted.outcomes)
        for call in tools:
            mine, outcomes = outcomes[: call.items], outcomes[call.items :]
            answers[call.tool_call_id] = {
                "tool_call_id": call.tool_call_id,
                "output": output_text(mine, labels(call)),
                "operations": [operation_ref(o) for o in mine if o.operation_id],
            }
        return admitted.batch_id, answers

    async def _confirm(self, ctx: TurnContext, args: ConfirmArgs) -> AdmissionOutcome:
        op = self._surface.view.operations.get(args.operation_id)
        if op is None or op.session_id != ctx.session_id:
            return AdmissionOutcome(
                args.operation_id, "", "unknown", None, reason="unknown operation"
            )
        return await self._admission.confirm(ctx, args.operation_id, accept=args.confirmed)

