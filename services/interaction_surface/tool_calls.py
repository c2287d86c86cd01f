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

Past the usual module size because the request is all-or-nothing across validation,
admission and the idempotency record: keeping the three together keeps that rule visible.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError

from libs import metrics
from libs.admission import ELSEWHERE, Admission, AdmissionOutcome, ToolCall, TurnContext
from libs.admission.rules import check_item
from libs.domain import SessionState
from libs.events import ToolCallsReceived
from libs.tools import Caller, ToolDeclaration, ToolRegistry

from .answers import WriteBehind, claim_verdict
from .chat.conversation import tool_spec
from .session_locks import SessionLocks

log = logging.getLogger(__name__)

MAX_TOOL_CALL_ID_BYTES = 256
CONFIRM_TOOL = "confirm_operation"
FORMATS = ("openai", "anthropic", "json-schema")

Ref = Annotated[str, msgspec.Meta(pattern=r"^[A-Za-z0-9_.:-]{1,128}$")]


class CallIn(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One call as the model emitted it."""

    tool_call_id: Annotated[str, msgspec.Meta(min_length=1)]
    name: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    arguments: dict[str, Any] | str = msgspec.field(default_factory=dict)


class ToolCallsBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """`POST /v1/sessions/{id}/tool-calls`."""

    calls: Annotated[list[CallIn], msgspec.Meta(min_length=1, max_length=64)]
    turn_id: Ref | None = None
    response_id: Ref | None = None
    user_text: Annotated[str, msgspec.Meta(max_length=4000)] | None = None


class ConfirmArgs(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The user's answer to an operation awaiting confirmation."""

    operation_id: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    confirmed: bool


class BadCalls(Exception):
    """The request is refused whole; nothing was written."""


class StillAnswering(Exception):
    """A repeated tool_call_id whose first request has not finished."""


# --------------------------------------------------------------------------- definitions


def offered(registry: ToolRegistry, agent: str) -> list[ToolDeclaration]:
    """The tools the agent may call: not internal, and allowed to that agent."""
    return [
        t for t in registry.tools()
        if not t.internal and (t.agents is None or agent in t.agents)
    ]


def _confirm_spec() -> dict[str, Any]:
    return {
        "name": CONFIRM_TOOL,
        "description": (
            "Record the user's answer to an operation that awaits confirmation (an earlier "
            "tool result names its operation_id). Use confirmed=true only after the user "
            "clearly said yes; confirmed=false when they said no."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "operation_id": {"type": "string"},
                "confirmed": {"type": "boolean"},
            },
            "required": ["operation_id", "confirmed"],
            "additionalProperties": False,
        },
    }


def _needs_confirm_tool(tools: Sequence[ToolDeclaration]) -> bool:
    names = {t.name for t in tools}
    return CONFIRM_TOOL not in names and any(
        t.needs_confirmation or t.duplicate_policy == "confirm" for t in tools
    )


def definitions(tools: Sequence[ToolDeclaration], fmt: str) -> list[dict[str, Any]]:
    """The tools as function definitions in one model vendor's format."""
    specs: list[dict[str, Any]] = []
    for declaration in tools:
        spec = tool_spec(declaration)
        specs.append(
            {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
        )
    if _needs_confirm_tool(tools):
        specs.append(_confirm_spec())
    if fmt == "openai":
        return [{"type": "function", "function": s} for s in specs]
    if fmt == "anthropic":
        return [
            {"name": s["name"], "description": s["description"], "input_schema": s["parameters"]}
            for s in specs
        ]
    return specs


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True, slots=True)
class Prepared:
    """One validated call."""

    tool_call_id: str
    name: str
    arguments: dict[str, Any]
    declaration: ToolDeclaration | None
    # How many admission outcomes it yields (one per batch item).
    items: int = 1


def _arguments(call: CallIn) -> dict[str, Any]:
    if isinstance(call.arguments, dict):
        return call.arguments
    text = call.arguments.strip() or "{}"
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise BadCalls(f"{call.tool_call_id}: arguments are not JSON ({exc})") from None
    if not isinstance(parsed, dict):
        raise BadCalls(f"{call.tool_call_id}: arguments must be a JSON object")
    return parsed


def _check_item(
    call_id: str, declaration: ToolDeclaration, item: dict[str, Any], caller: Caller
) -> None:
    """Refuse what can never be admitted; leave authorisation to admission, which records it.

    The same order as admission (authorise, normalise, validate): a caller's own
    tenant-qualified resource ("acme/github") fits the schema only once it is stripped.
    """
    checked = check_item(declaration, item, caller)
    if isinstance(checked, tuple) and checked[0] == "invalid_arguments":
        raise BadCalls(f"{call_id}: arguments do not match {declaration.name}: {checked[1]}")


def _check_schema(
    call_id: str, declaration: ToolDeclaration, args: dict[str, Any], caller: Caller
) -> int:
    """Validate against the published schema; the number of batch items."""
    if declaration.batch_field and declaration.item_field:
        extra = set(args) - {declaration.batch_field}
        if extra:
            raise BadCalls(
                f"{call_id}: {declaration.name} has no argument {', '.join(sorted(extra))}"
            )
        items = args.get(declaration.batch_field)
        if not isinstance(items, list) or not 1 <= len(items) <= declaration.max_batch:
            raise BadCalls(
                f"{call_id}: {declaration.batch_field} must be a list of 1 to "
                f"{declaration.max_batch} items"
            )
        for item in items:
            _check_item(call_id, declaration, {declaration.item_field: item}, caller)
        return len(items)
    _check_item(call_id, declaration, args, caller)
    return 1


def prepare(
    body: ToolCallsBody, tools: Sequence[ToolDeclaration], caller: Caller
) -> list[Prepared]:
    """Every call checked; BadCalls names the first that is not acceptable."""
    by_name = {t.name: t for t in tools}
    confirm = _needs_confirm_tool(tools)
    seen: set[str] = set()
    prepared: list[Prepared] = []
    for call in body.calls:
        call_id = call.tool_call_id
        if len(call_id.encode()) > MAX_TOOL_CALL_ID_BYTES:
            raise BadCalls(f"a tool_call_id is longer than {MAX_TOOL_CALL_ID_BYTES} bytes")
        if call_id in seen:
            raise BadCalls(f"tool_call_id {call_id!r} appears twice in the request")
        seen.add(call_id)
        args = _arguments(call)
        declaration = by_name.get(call.name)
        if declaration is not None:
            items = _check_schema(call_id, declaration, args, caller)
            prepared.append(Prepared(call_id, call.name, args, declaration, items))
        elif confirm and call.name == CONFIRM_TOOL:
            try:
                msgspec.convert(args, ConfirmArgs)
            except msgspec.ValidationError as exc:
                raise BadCalls(f"{call_id}: arguments do not match {CONFIRM_TOOL}: {exc}") from None
            prepared.append(Prepared(call_id, call.name, args, None))
        else:
            raise BadCalls(f"{call_id}: unknown tool {call.name!r} for this agent")
    return prepared


# --------------------------------------------------------------------------- outputs


def _what(outcome: AdmissionOutcome, label: str = "") -> str:
    about = f" for {label}" if label else ""
    return f"{outcome.tool}{about} (operation {outcome.operation_id})"


_UNDER_WAY = (
    "Tell the user it is under way, not that it is done; holdline says when the result "
    "is ready."
)


def output_line(outcome: AdmissionOutcome, label: str = "") -> str:
    """What the model is told about one item: started, refused or waiting; never done."""
    status, what = outcome.status, _what(outcome, label)
    if outcome.reason == ELSEWHERE:
        return (
            f"Already in progress in another conversation of this user: {what}, {status}; "
            "no second request was made and its result is reported there."
        )
    if outcome.existing:
        return f"Already requested earlier: {what} is {status}; no second request was made."
    if status == "rejected":
        reason = outcome.reason or "refused"
        detail = f": {outcome.detail}" if outcome.detail else ""
        return f"Refused: {what} was not done ({reason}{detail})."
    if status == "awaiting_confirmation":
        prompt = outcome.prompt or f"Please confirm {outcome.tool}."
        return (
            f"Needs the user's confirmation, nothing was done yet: {prompt} Ask the user, "
            f"then call {CONFIRM_TOOL} with operation_id={outcome.operation_id} and "
            "confirmed=true or false."
        )
    return f"Accepted: {what} has started and is not finished."


def output_text(outcomes: Sequence[AdmissionOutcome], labels: Sequence[str]) -> str:
    """One call's output: a line per item, and what to tell the user when work started."""
    lines = [
        output_line(o, labels[i] if i < len(labels) else "") for i, o in enumerate(outcomes)
    ]
    started = any(
        not o.existing and o.status not in ("rejected", "awaiting_confirmation")
        for o in outcomes
    )
    return " ".join([*lines, _UNDER_WAY] if started else lines)


def labels(call: Prepared) -> list[str]:
    """What each item of a call is about, in the words of its arguments."""
    declaration = call.declaration
    if declaration is not None and declaration.batch_field:
        return [str(item) for item in call.arguments.get(declaration.batch_field, [])]
    shown = ", ".join(f"{k}={v}" for k, v in sorted(call.arguments.items()))
    return [shown]


def confirm_line(outcome: AdmissionOutcome, accepted: bool) -> str:
    """What the model is told about a confirmation."""
    if outcome.reason == "not_awaiting_confirmation":
        return f"Nothing to confirm: {_what(outcome)} is {outcome.status}."
    if outcome.reason:
        return f"Nothing to confirm: {outcome.reason}."
    if not accepted:
        return f"Declined: {_what(outcome)} will not be done."
    return f"Confirmed: {_what(outcome)} has started and is not finished. {_UNDER_WAY}"


def _ref(o: AdmissionOutcome) -> dict[str, Any]:
    return {"operation_id": o.operation_id, "tool": o.tool, "status": o.status,
            "batch_id": o.batch_id}


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
        async def store() -> None:
            with metrics.turn_phase("tool_calls_store"):
                await asyncio.gather(*(
                    kv.put(
                        self._key(session_id, call.tool_call_id),
                        json.dumps({
                            "state": "answered", "turn_id": turn_id, "batch_id": batch_id,
                            "result": answers[call.tool_call_id],
                        }).encode(),
                    )
                    for call in calls
                ))

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
                    "operations": [_ref(outcome)] if outcome.tool else [],
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
                "operations": [_ref(o) for o in mine if o.operation_id],
            }
        return admitted.batch_id, answers

    async def _confirm(self, ctx: TurnContext, args: ConfirmArgs) -> AdmissionOutcome:
        op = self._surface.view.operations.get(args.operation_id)
        if op is None or op.session_id != ctx.session_id:
            return AdmissionOutcome(
                args.operation_id, "", "unknown", None, reason="unknown operation"
            )
        return await self._admission.confirm(ctx, args.operation_id, accept=args.confirmed)

