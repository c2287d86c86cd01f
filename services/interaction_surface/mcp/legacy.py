"""The 2025-11-25 tasks API on `/mcp`: task-augmented `tools/call`, `tasks/get`,
`tasks/result`, `tasks/list`, `tasks/cancel`, on the same projections as the modern tasks.

The SDK's 2025-11-25 surface has no `tasks/*` methods and sieves every `tools/call` result
into a `CallToolResult`, so these are served by a server middleware (`LegacyTasks`, the
SDK's own seam in front of its dispatch) on a 2025-11-25 connection only; every other
request goes on to the SDK. `initialize` gets the `tasks` capability added when 2025-11-25
is negotiated. The calls and cancels are `McpHandlers`' (one batch, the same admission,
the same intent keys: a re-issue joins); the words are `legacy_tasks.py`'s (pure).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CallToolResult,
    PaginatedRequestParams,
)
from mcp_types import methods as spec_methods

from libs.domain import BatchState, SessionState

from ..agent.tool_formats import CONFIRM_TOOL
from .handlers import McpHandlers
from .legacy_tasks import (
    CAPABILITY,
    LEGACY_TASKS_VERSION,
    PAGE_SIZE,
    TERMINAL,
    LegacyView,
    created,
    cursor,
    legacy_view,
    offset_of,
    payload,
    wire_task,
)
from .params import TaskParams
from .tasks import PENDING_TOOL, task_id, task_result

# The longest `tasks/result` waits for a task to end before it answers "still running".
RESULT_WAIT_S = 30.0
# How long `tasks/cancel` waits for the provider to confirm before it answers.
CANCEL_WAIT_S = 5.0
# A server error code: the task did not end within `RESULT_WAIT_S`.
STILL_RUNNING = -32000

Ctx = ServerRequestContext[Any, Any]


class LegacyTasks:
    """The server middleware that serves 2025-11-25's tasks API (the rest goes on)."""

    def __init__(self, handlers: McpHandlers) -> None:
        self._handlers = handlers
        self._methods: dict[str, Callable[[Ctx, Any], Awaitable[dict[str, Any]]]] = {
            "tasks/get": self._get,
            "tasks/result": self._result,
            "tasks/cancel": self._cancel,
        }

    async def __call__(self, ctx: Ctx, call_next: CallNext) -> HandlerResult:
        """Serve a 2025-11-25 task request here; hand everything else to the SDK."""
        if ctx.method == "initialize":
            return with_capability(await call_next(ctx))
        if ctx.request_id is None or ctx.protocol_version != LEGACY_TASKS_VERSION:
            return await call_next(ctx)
        raw = dict(ctx.params or {})
        if ctx.method == "tools/call" and raw.get("task") is not None:
            return await self._call(ctx, raw)
        if ctx.method == "tasks/list":
            return await self._list(ctx, PaginatedRequestParams.model_validate(raw, by_name=False))
        handler = self._methods.get(ctx.method)
        if handler is None:
            return await call_next(ctx)
        return await handler(ctx, TaskParams.model_validate(raw, by_name=False))

    # ------------------------------------------------------------------ helpers

    async def _find(self, ctx: Ctx, task: str) -> tuple[SessionState, BatchState]:
        session = self._handlers.session_of(ctx)
        return session, await self._handlers.batch_for(session, task)

    def _now(self, session: SessionState, task: str, batch: BatchState) -> LegacyView:
        handlers = self._handlers
        current = handlers.tasks.batch_of(session, task) or batch
        return legacy_view(handlers.tasks.facts(session, current))

    async def _until_terminal(
        self, session: SessionState, task: str, batch: BatchState, wait_s: float
    ) -> LegacyView:
        """The task's view once it is terminal, or when `wait_s` has passed."""
        view = self._handlers.surface.view
        deadline = time.monotonic() + wait_s
        while True:
            current = self._now(session, task, batch)
            left = deadline - time.monotonic()
            if current.status in TERMINAL or left <= 0:
                return current
            await view.wait_session_change(session.session_id, min(left, 5.0))

    # ------------------------------------------------------------------ methods

    async def _call(self, ctx: Ctx, raw: dict[str, Any]) -> dict[str, Any] | CallToolResult:
        """A task-augmented `tools/call`: one batch, answered at once with its task."""
        spec_methods.validate_client_request("tools/call", LEGACY_TASKS_VERSION, raw)
        params = CallToolRequestParams.model_validate(raw, by_name=False)
        if params.name in (PENDING_TOOL, CONFIRM_TOOL):
            # `execution.taskSupport` is absent (forbidden) for these: the spec's answer.
            raise MCPError(
                code=METHOD_NOT_FOUND,
                message=f"{params.name} does not run as a task; call it without `task`",
            )
        handlers = self._handlers
        session = handlers.session_of(ctx)
        out = await handlers.call(session, params.name, dict(params.arguments or {}),
                                  tasked=True)
        if isinstance(out, CallToolResult):
            # Refused before any batch (arguments, rate): the tool's error, no task.
            return out
        task = task_id(session.token_hash, out.facts.batch_id)
        return created(task, legacy_view(out.facts), out.facts, out.output)

    async def _get(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        """`tasks/get`: the task's status from its batch's events."""
        session, batch = await self._find(ctx, params.task_id)
        facts = self._handlers.tasks.facts(session, batch)
        return wire_task(params.task_id, legacy_view(facts), facts)

    async def _result(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        """`tasks/result`: the call's result once the task is terminal (waiting for it,
        bounded); handing it out is the closing's one delivery."""
        session, batch = await self._find(ctx, params.task_id)
        view = await self._until_terminal(session, params.task_id, batch, RESULT_WAIT_S)
        if view.status not in TERMINAL:
            raise MCPError(
                code=STILL_RUNNING,
                message=f"Task {params.task_id} is still {view.status}; call tasks/result "
                "again, or poll tasks/get",
                data={"taskId": params.task_id, "status": view.status},
            )
        current = self._handlers.tasks.batch_of(session, params.task_id) or batch
        if current.final_delivery_id is not None:
            await self._handlers.channel.hand_out(current.final_delivery_id)
        return payload(params.task_id, view)

    async def _list(self, ctx: Ctx, params: PaginatedRequestParams) -> dict[str, Any]:
        """`tasks/list`: the session's tasks, oldest first, a page at a time."""
        offset = offset_of(params.cursor)
        if offset is None:
            raise MCPError(code=INVALID_PARAMS, message="Invalid cursor for tasks/list")
        handlers = self._handlers
        session = handlers.session_of(ctx)
        await handlers.surface.view.sync()
        batches = [
            b for b in handlers.surface.view.session_batches(session.session_id)
            if task_result(b.turn_id)
        ]
        tasks: list[dict[str, Any]] = []
        for batch in batches[offset:offset + PAGE_SIZE]:
            facts = handlers.tasks.facts(session, batch)
            task = task_id(session.token_hash, batch.batch_id)
            tasks.append(wire_task(task, legacy_view(facts), facts))
        out: dict[str, Any] = {"tasks": tasks}
        if offset + PAGE_SIZE < len(batches):
            out["nextCursor"] = cursor(offset + PAGE_SIZE)
        return out

    async def _cancel(self, ctx: Ctx, params: TaskParams) -> dict[str, Any]:
        """`tasks/cancel`: the business cancel of the task's operations, answered once the
        task ended (bounded). Only a confirmed cancel says `cancelled`: a member already
        committed stays committed, and the task says so."""
        session, batch = await self._find(ctx, params.task_id)
        facts = self._handlers.tasks.facts(session, batch)
        view = legacy_view(facts)
        if view.status in TERMINAL:
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Cannot cancel task {params.task_id}: it is already {view.status}",
            )
        await self._handlers.cancel_batch(session, batch, facts)
        view = await self._until_terminal(session, params.task_id, batch, CANCEL_WAIT_S)
        if view.status not in TERMINAL:
            view = LegacyView(
                view.status,
                "Cancellation requested; the task says cancelled once the provider confirms "
                "it (what was already done stays done).",
            )
        current = self._handlers.tasks.batch_of(session, params.task_id) or batch
        return wire_task(params.task_id, view, self._handlers.tasks.facts(session, current))


def with_capability(result: HandlerResult) -> HandlerResult:
    """A 2025-11-25 `initialize` result with the server's `tasks` capability."""
    if not isinstance(result, dict) or result.get("protocolVersion") != LEGACY_TASKS_VERSION:
        return result
    capabilities = dict(result.get("capabilities") or {})
    capabilities["tasks"] = CAPABILITY
    return {**result, "capabilities": capabilities}
