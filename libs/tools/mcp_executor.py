"""`McpExecutor`: one tool of an MCP server behind the whole executor contract (§7c).

Every call carries the operation's idempotency key in `_meta` as
`io.holdline/idempotency-key`. A task-capable tool answers with a task: the attempt is then
accepted for async completion, `poll` reads `tasks/get` (its status message becomes an
`operation.progress`) and `cancel` sends `tasks/cancel`. What an answer means:

- `isError`, a JSON-RPC error, an answer that cannot be read or one larger than the cap:
  a business failure (final), with the server's words as the reason;
- no open session (nothing was sent): retryable (`connect_error`);
- sent, then no answer: UNKNOWN, reconciled through the declared lookup tool; without one,
  `unknown_outcome` (failed for good, never sent again).

The lookup tool is called with the key in `key_argument`; non-empty structured content (not
`null`, not `{"result": null}`) means the effect exists and is the result.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from libs.events import AttemptOutcome

from .executor import AttemptResult, CallbackResult, Lookup, OperationCall, bad_callback
from .mcp_sessions import McpConnection, NotConnected, describe
from .mcp_wire import IDEMPOTENCY_KEY, CancelTask, CreatedTask, GetTask, TaskParams, TaskState

DEFAULT_MAX_RESULT_BYTES = 256 * 1024
# How long an attempt waits for a session before it counts as not sent.
_SESSION_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class McpLookup:
    """A lookup tool of the same server, called with the idempotency key in `key_argument`."""

    tool: str
    key_argument: str


class _Refused(Exception):
    """The server answered, and the answer is a final failure."""


def _text(content: list[Any]) -> str:
    return " ".join(c.text for c in content if isinstance(c, mcp_types.TextContent)).strip()


def _result_of(answer: mcp_types.CallToolResult, max_bytes: int) -> dict[str, Any]:
    """The result a closing may quote: structured content, else the text content."""
    if answer.is_error:
        raise _Refused(_text(answer.content) or "the tool reported an error")
    result = answer.structured_content
    if result is None:
        result = {"text": _text(answer.content)}
    size = len(json.dumps(result, default=str))
    if size > max_bytes:
        raise _Refused(f"result of {size} bytes is larger than {max_bytes}")
    return dict(result)


def _exists(structured: Any) -> bool:
    if structured is None or structured == {"result": None}:
        return False
    return not (isinstance(structured, Mapping | list) and not structured)


class McpExecutor:
    """Runs one tool of one server through this process's session to that server."""

    def __init__(
        self,
        connection: McpConnection,
        tool: str,
        *,
        lookup: McpLookup | None = None,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
    ) -> None:
        self._connection = connection
        self._tool = tool
        self._lookup = lookup
        self._max = max_result_bytes

    def _lost(self, detail: str, started: float) -> AttemptResult:
        outcome: AttemptOutcome = "timeout_after_send" if self._lookup else "unknown_outcome"
        if self._lookup is None:
            detail += "; no lookup tool declared, so it is not sent again"
        return AttemptResult(outcome, detail=detail, duration_ms=_ms(started))

    async def execute(self, call: OperationCall, *, timeout_s: float) -> AttemptResult:
        """One `tools/call` with the key in `_meta`; a task when the server runs it as one."""
        started = time.monotonic()
        wait_s = timeout_s if self._connection.opened == 0 else min(timeout_s, _SESSION_WAIT_S)
        try:
            session = await self._connection.session(wait_s=wait_s)
        except NotConnected as exc:
            return AttemptResult("connect_error", detail=str(exc), duration_ms=_ms(started))
        meta: Any = {IDEMPOTENCY_KEY: call.idempotency_key}
        try:
            async with asyncio.timeout(timeout_s):
                answer = await session.call_tool(
                    self._tool,
                    dict(call.arguments),
                    read_timeout_seconds=timeout_s,
                    meta=meta,
                    allow_claimed=True,
                )
        except TimeoutError:
            return self._lost(f"no answer within {timeout_s:g} s", started)
        except MCPError as exc:
            if _answered(exc):
                return _final(f"refused: {exc.error.message}", started)
            self._connection.broken()
            return self._lost(f"connection lost after sending: {describe(exc)}", started)
        except ValidationError as exc:
            return _final(f"unreadable answer: {describe(exc)}", started)
        except RuntimeError as exc:
            if "structured content" not in str(exc):
                self._connection.broken()
                return self._lost(f"connection lost after sending: {describe(exc)}", started)
            # The SDK checked the answer against the tool's output schema: it does not fit.
            return _final(f"unreadable answer: {describe(exc)}", started)
        except Exception as exc:  # noqa: BLE001 - the transport failed after the send
            self._connection.broken()
            return self._lost(f"connection lost after sending: {describe(exc)}", started)
        if isinstance(answer, CreatedTask):
            return AttemptResult(
                "accepted_async",
                provider_ref=answer.task_id,
                result={"task_id": answer.task_id},
                detail=answer.status_message or "running as an MCP task",
                duration_ms=_ms(started),
            )
        if not isinstance(answer, mcp_types.CallToolResult):
            return _final(f"unexpected answer {type(answer).__name__}", started)
        try:
            result = _result_of(answer, self._max)
        except _Refused as exc:
            return _final(str(exc), started)
        return AttemptResult("success", result=result, duration_ms=_ms(started))

    async def lookup(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """The declared lookup tool, called with the key; without one the outcome stays unknown."""
        if self._lookup is None:
            return Lookup("unknown", detail="no lookup tool declared, so it is not sent again")
        try:
            session = await self._connection.session(wait_s=min(timeout_s, _SESSION_WAIT_S))
            async with asyncio.timeout(timeout_s):
                answer = await session.call_tool(
                    self._lookup.tool,
                    {self._lookup.key_argument: call.idempotency_key},
                    read_timeout_seconds=timeout_s,
                )
        except (NotConnected, TimeoutError, MCPError, ValidationError) as exc:
            return Lookup("error", detail=f"lookup: {describe(exc)}")
        except Exception as exc:  # noqa: BLE001 - any transport failure: look again later
            self._connection.broken()
            return Lookup("error", detail=f"lookup: {describe(exc)}")
        found = answer.structured_content
        if answer.is_error or not _exists(found):
            return Lookup("absent", detail=_text(answer.content))
        inner = found.get("result") if isinstance(found, dict) and len(found) == 1 else None
        if isinstance(inner, dict):
            found = inner  # a tool returning "a record or nothing" wraps it in `result`
        return Lookup("committed", result=dict(found or {}))

    async def poll(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """`tasks/get` for the operation's task; its status message is the progress."""
        if call.provider_ref is None:
            return await self.lookup(call, timeout_s=timeout_s)
        try:
            state = await self._task_request(GetTask, call.provider_ref, timeout_s)
        except Exception as exc:  # noqa: BLE001 - unreachable: poll again later
            return Lookup("error", detail=f"tasks/get: {describe(exc)}")
        return self._task_lookup(state)

    async def cancel(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """`tasks/cancel` for a running task, then the state the server confirms."""
        if call.provider_ref is None:
            return await self.lookup(call, timeout_s=timeout_s)
        try:
            await self._task_request(CancelTask, call.provider_ref, timeout_s)
        except MCPError as exc:
            if not _answered(exc):
                return Lookup("error", detail=f"tasks/cancel: {describe(exc)}")
            # Refused (already terminal, say): what the task became tells the truth.
        except Exception as exc:  # noqa: BLE001 - unreachable: try again later
            return Lookup("error", detail=f"tasks/cancel: {describe(exc)}")
        return await self.poll(call, timeout_s=timeout_s)

    def parse_callback(
        self, headers: Mapping[str, str], body: bytes, *, now: float
    ) -> CallbackResult:
        """MCP servers report through `tasks/get`, never through a callback."""
        raise bad_callback("MCP tools complete through tasks/get, not callbacks")

    async def _task_request(
        self, kind: type[GetTask] | type[CancelTask], task_id: str, timeout_s: float
    ) -> TaskState | mcp_types.Result:
        session = await self._connection.session(wait_s=min(timeout_s, _SESSION_WAIT_S))
        result: type[TaskState] | type[mcp_types.Result] = (
            TaskState if kind is GetTask else mcp_types.Result
        )
        async with asyncio.timeout(timeout_s):
            return await session.send_request(
                kind(params=TaskParams(task_id=task_id)),
                result,
                request_read_timeout_seconds=timeout_s,
            )

    def _task_lookup(self, state: TaskState | mcp_types.Result) -> Lookup:
        if not isinstance(state, TaskState):
            return Lookup("error", detail="tasks/get answered something else")
        ref = state.task_id
        match state.status:
            case "completed":
                try:
                    answer = mcp_types.CallToolResult.model_validate(state.result or {})
                    result = _result_of(answer, self._max)
                except (ValidationError, _Refused) as exc:
                    return Lookup("failed", provider_ref=ref, detail=describe(exc))
                return Lookup("committed", result=result, provider_ref=ref)
            case "failed":
                error = state.error or {}
                message = error.get("message") if isinstance(error, dict) else None
                return Lookup("failed", provider_ref=ref, detail=str(message or "task failed"))
            case "cancelled":
                return Lookup("cancelled", provider_ref=ref, detail=state.status_message or "")
        return Lookup("pending", provider_ref=ref, detail=state.status_message or "")


def _answered(exc: MCPError) -> bool:
    """A JSON-RPC error the server sent (not one the client made up for a lost connection)."""
    return exc.error.code not in _CLIENT_SIDE


# Errors the client raises itself when the connection closes or a request times out.
_CLIENT_SIDE = frozenset({mcp_types.CONNECTION_CLOSED, mcp_types.REQUEST_TIMEOUT})


def _final(detail: str, started: float) -> AttemptResult:
    return AttemptResult("business_error", detail=detail[:500], duration_ms=_ms(started))


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000.0
