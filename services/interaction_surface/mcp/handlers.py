"""The MCP request handlers: `tools/list`, `tools/call` and the tasks extension's
`tasks/get`, `tasks/update`, `tasks/cancel`, over the session `auth.py` bound the request to.

A call goes through the Agent API's admission (`agent/tool_calls.py`: the same validation,
refusals, limits, intent keys, duplicate policy and idempotency record), as one batch. Its
`tool_call_id` is derived from the tool and arguments (`tasks.call_id`), so a call
re-issued after a lost stream is a repeat of the first: same answer, same batch, same task,
nothing admitted again. Confirmation answers go through the same path as the built-in
`confirm_operation` tool; `tasks/cancel` through admission's business cancel.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    Tool,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from libs.admission import TurnContext
from libs.domain import BatchState, SessionState

from ..agent.acks import AckRefused
from ..agent.routes import AgentApi
from ..agent.tool_formats import (
    CONFIRM_TOOL,
    BadCalls,
    CallIn,
    StillAnswering,
    ToolCallsBody,
)
from ..core.http import ProblemError
from ..core.surface import Surface
from .channel import McpChannel
from .params import Tasked, TaskParams, UpdateParams
from .projection import Tasks
from .tasks import (
    PENDING_TOOL,
    TASKED_TURN,
    TASKS_EXTENSION,
    TaskFacts,
    call_id,
    confirm_key,
    confirmed,
    task_id,
    task_view,
    wire_task,
)
from .tools import listed, names

log = logging.getLogger(__name__)

SESSION_KEY = "holdline_session"
UNTASKED = "mcpc"


def _not_found(task: str) -> MCPError:
    # One answer for a task that does not exist and one of another session.
    return MCPError(code=INVALID_PARAMS, message=f"Task {task} not found")


def _text(text: str, *, error: bool = False, **structured: Any) -> CallToolResult:
    out: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": error}
    if structured:
        out["structuredContent"] = structured
    return CallToolResult.model_validate(out)


class McpHandlers:
    """What `/mcp` answers, for the session each request is bound to."""

    def __init__(
        self, surface: Surface, agent_api: AgentApi, tasks: Tasks, channel: McpChannel
    ) -> None:
        self.surface = surface
        self.agent_api = agent_api
        self.tasks = tasks
        self.channel = channel
        self._tool_names: dict[str, frozenset[str]] = {}

    # ------------------------------------------------------------------ helpers

    def session_of(self, ctx: ServerRequestContext[Any, Any]) -> SessionState:
        """The session `auth.py` bound the request to, as the live view holds it now."""
        return self._session(ctx)

    def _session(self, ctx: ServerRequestContext[Any, Any]) -> SessionState:
        request = ctx.request
        session_id = None if request is None else request.scope.get("state", {}).get(SESSION_KEY)
        state = self.surface.view.session(session_id) if session_id else None
        if state is None:
            raise MCPError(code=INVALID_PARAMS, message="no holdline session for this request")
        return state

    @staticmethod
    def tasked(ctx: ServerRequestContext[Any, Any]) -> bool:
        """Whether the client advertised the tasks extension on this (modern) request."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            return False
        caps = ctx.session.client_capabilities
        return bool(caps and caps.extensions and TASKS_EXTENSION in caps.extensions)

    def _started(self) -> Any:
        started = self.surface.started
        if started is None:
            raise MCPError(code=-32000, message="holdline is starting; retry")
        return started

    def _task_method(self, ctx: ServerRequestContext[Any, Any], task: str) -> None:
        """The gates every `tasks/*` request passes: the modern protocol, the tasks extension
        declared on the request, and an `Mcp-Name` header (if any) naming the same task."""
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(code=METHOD_NOT_FOUND, message=f"{ctx.method} needs protocol 2026-07-28")
        if not self.tasked(ctx):
            raise MCPError(
                code=MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"{ctx.method} needs the client to declare {TASKS_EXTENSION}",
                data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
            )
        request = ctx.request
        named = None if request is None else request.headers.get("mcp-name")
        if named is not None and named != task:
            raise MCPError(
                code=HEADER_MISMATCH,
                message="the Mcp-Name header does not match the request's taskId",
            )

    async def batch_for(self, session: SessionState, task: str) -> BatchState:
        """The session's batch a task id names; not found (one answer) otherwise."""
        found = self.tasks.batch_of(session, task)
        if found is None:
            await self.surface.view.sync()
            found = self.tasks.batch_of(session, task)
        if found is None:
            raise _not_found(task)
        return found

    # ------------------------------------------------------------------ tools

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], _params: Any
    ) -> ListToolsResult:
        """The session's active agent's tools (read again on every list: a handoff shows)."""
        session = self._session(ctx)
        registry = self._started().tool_calls.registry
        return ListToolsResult(
            tools=[
                Tool.model_validate(t)
                for t in listed(registry, session.agent, ctx.protocol_version)
            ]
        )

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams
    ) -> CallToolResult | dict[str, Any]:
        """One batch through admission: a task when the client takes tasks, else the
        honest acceptance."""
        session = self._session(ctx)
        out = await self.call(
            session, params.name, dict(params.arguments or {}), tasked=self.tasked(ctx)
        )
        if isinstance(out, CallToolResult):
            return out
        facts = out.facts
        return {
            "resultType": "task",
            **wire_task(task_id(session.token_hash, facts.batch_id), task_view(facts), facts,
                        with_payload=False),
        }

    async def call(
        self, session: SessionState, name: str, arguments: dict[str, Any], *, tasked: bool
    ) -> CallToolResult | Tasked:
        """One call as one batch through admission: its task's facts when `tasked` (whatever
        the protocol version asked for it), else the honest acceptance as its result."""
        started = self._started()
        if name == PENDING_TOOL:
            return await self._pending(session)
        if name not in self._names(started.tool_calls.registry, session.agent):
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown tool: {name}")
        if session.closed:
            raise MCPError(code=INVALID_PARAMS, message="the session is closed")
        try:
            self.surface.limit(session)
        except ProblemError as exc:
            return _text(exc.detail, error=True)
        body = ToolCallsBody(
            calls=[CallIn(tool_call_id=call_id(name, arguments, tasked=tasked), name=name,
                          arguments=arguments)],
            # The batch's turn id says whose its closing is (`tasks.TASKED_TURN`).
            turn_id=self.surface.ids.new(TASKED_TURN.rstrip("_") if tasked else UNTASKED),
        )
        # A call already admitted in this session (a re-issue) is answered from its events:
        # the claim of its first answer may be one a dead surface never finished.
        known = self.tasks.answered_by_events(session, body.calls[0].tool_call_id)
        try:
            answer = known or await started.tool_calls.handle(session, body)
        except BadCalls as exc:
            # The spec's tool execution error: the model can correct its arguments.
            return _text(f"Invalid arguments: {exc}", error=True)
        except StillAnswering:
            # The first request's surface died before it stored its answer: its batch, if
            # admission wrote one, is found from the events and the call joins it.
            answer = self.tasks.answered_by_events(session, body.calls[0].tool_call_id)
            if answer is None:
                raise MCPError(
                    code=-32000, message="this call is still being answered; retry"
                ) from None
        result = answer["results"][0]
        fresh = self.tasks.admitted(answer["batch_id"], result["operations"],
                                    self.surface.clock.now())
        tasked_result = tasked and name != CONFIRM_TOOL  # a yes or no is never a task
        if tasked_result and fresh is not None:
            # Admitted in this session a moment ago: the task is created from admission's
            # answer, not after the view reads back what was just written (a wait behind
            # every other session's events under load).
            return Tasked(fresh, result["output"])
        named = [answer["batch_id"], *(o.get("batch_id") for o in result["operations"])]
        if any(b and self.surface.view.batches.get(b) is None for b in named):
            # Written by admission a moment ago: the view catches up before it is read.
            await self.surface.view.sync()
        batch_id = self._own_batch(session, answer["batch_id"], result["operations"])
        batch = self.surface.view.batches.get(batch_id) if batch_id else None
        if tasked_result and batch is not None:
            return Tasked(self.tasks.facts(session, batch), result["output"])
        refused = bool(result["operations"]) and all(
            o["status"] == "rejected" for o in result["operations"]
        )
        return _text(
            result["output"], error=refused, batch_id=batch_id,
            operations=result["operations"],
        )

    def _names(self, registry: Any, agent: str) -> frozenset[str]:
        # The registry is fixed once started: each agent's names are worked out once.
        known = self._tool_names.get(agent)
        if known is None:
            if len(self._tool_names) >= 1024:
                self._tool_names.clear()  # any agent name may be used when none is declared
            known = self._tool_names[agent] = frozenset(names(registry, agent))
        return known

    def _own_batch(
        self, session: SessionState, batch_id: str | None, operations: list[dict[str, Any]]
    ) -> str | None:
        """The batch the call's closing belongs to in this session: the new one, or the one
        an intent already admitted here joined (never another session's)."""
        candidates = [batch_id] if batch_id else [o.get("batch_id") for o in operations]
        for candidate in candidates:
            found = self.surface.view.batches.get(candidate) if candidate else None
            if found is not None and found.session_id == session.session_id:
                return found.batch_id
        return None

    async def _pending(self, session: SessionState) -> CallToolResult:
        """The closings that found no channel, returned and acknowledged `attached`."""
        await self.surface.view.sync()
        # A task's closing is its result, never a pending update (`AgentApi.pending` skips it).
        pending = self.agent_api.pending(session.session_id)
        for item in pending["deliveries"]:
            try:
                await self.agent_api.ack(
                    session.session_id, item["delivery_id"], "attached",
                    heard_text=None, turn_id=None,
                )
            except AckRefused as exc:
                log.info("pending %s not acknowledged: %s", item["delivery_id"], exc.detail)
        text = pending["context"] or "Nothing pending: no result arrived since the last check."
        return _text(text, deliveries=pending["deliveries"])

    # ------------------------------------------------------------------ tasks

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        """The task's status from its batch's events; a completed one carries its result."""
        self._task_method(ctx, params.task_id)
        session = self._session(ctx)
        batch = await self.batch_for(session, params.task_id)
        facts = self.tasks.facts(session, batch)
        view = task_view(facts)
        if view.status == "completed" and batch.final_delivery_id is not None:
            await self.channel.hand_out(batch.final_delivery_id)
        return {"resultType": "complete", **wire_task(params.task_id, view, facts,
                                                      with_payload=True)}

    async def update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateParams
    ) -> dict[str, Any]:
        """Answers to the task's confirmations: yes admits, no declines (via the confirm
        tool's path, so a repeated answer admits nothing)."""
        self._task_method(ctx, params.task_id)
        session = self._session(ctx)
        batch = await self.batch_for(session, params.task_id)
        facts = self.tasks.facts(session, batch)
        waiting = {confirm_key(m.operation_id): m for m in facts.members
                   if m.status == "awaiting_confirmation"}
        if task_view(facts).status != "input_required" or not waiting:
            asked = {confirm_key(m.operation_id) for m in facts.members if m.prompt}
            if params.input_responses and set(params.input_responses) <= asked:
                # Answers already given (a client that polled before the view caught up
                # answers again): the idempotent no-op SEP-2663 asks for.
                return {"resultType": "complete"}
            raise MCPError(
                code=INVALID_PARAMS, message=f"Task {params.task_id} is not waiting for input"
            )
        calls: list[CallIn] = []
        for key, response in params.input_responses.items():
            member = waiting.get(key)
            if member is None:
                continue  # an unknown or already answered key is ignored (SEP-2663)
            answer = confirmed(response)
            if answer is None:
                raise MCPError(
                    code=INVALID_PARAMS,
                    message=f"inputResponses[{key!r}] must accept with a boolean confirmed, "
                    "or decline",
                )
            calls.append(CallIn(
                tool_call_id=f"mcp.confirm.{member.operation_id}",
                name=CONFIRM_TOOL,
                arguments={"operation_id": member.operation_id, "confirmed": answer},
            ))
        if calls:
            body = ToolCallsBody(calls=calls, turn_id=batch.turn_id)
            try:
                await self._started().tool_calls.handle(session, body)
            except (BadCalls, StillAnswering) as exc:
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
            # The next `tasks/get` here reads the answer (every stream caught up).
            await self.surface.view.sync()
        return {"resultType": "complete"}

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        """The business cancel of the task's operations (only a confirmed state says
        cancelled; a member already committed stays so, and the result says it)."""
        self._task_method(ctx, params.task_id)
        session = self._session(ctx)
        batch = await self.batch_for(session, params.task_id)
        facts = self.tasks.facts(session, batch)
        if task_view(facts).status == "completed":
            raise MCPError(
                code=INVALID_PARAMS,
                message=f"Task {params.task_id} is already completed; nothing to cancel",
            )
        await self.cancel_batch(session, batch, facts)
        return {"resultType": "complete"}

    async def cancel_batch(
        self, session: SessionState, batch: BatchState, facts: TaskFacts
    ) -> None:
        """Request the business cancel of every member still running; a member awaiting
        confirmation is declined (the user's no). Whatever is committed stays committed."""
        started = self._started()
        ctx_turn = TurnContext(
            session_id=session.session_id, turn_id=batch.turn_id or "mcp",
            tenant_id=session.tenant_id, user_id=session.user_id, agent=session.agent,
        )
        declines: list[CallIn] = []
        for member in facts.members:
            if member.status == "awaiting_confirmation":
                # Not admitted yet: cancelling it is the user's no.
                declines.append(CallIn(
                    tool_call_id=f"mcp.confirm.{member.operation_id}", name=CONFIRM_TOOL,
                    arguments={"operation_id": member.operation_id, "confirmed": False},
                ))
            elif member.status not in _SETTLED:
                await started.admission.request_cancel(
                    ctx_turn, member.operation_id,
                    reason="cancelled by the MCP client (tasks/cancel)",
                )
        if declines:
            body = ToolCallsBody(calls=declines, turn_id=batch.turn_id)
            try:
                await started.tool_calls.handle(session, body)
            except (BadCalls, StillAnswering) as exc:
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
        await self.surface.view.sync()


_SETTLED = frozenset({"committed", "failed_final", "cancelled", "rejected", "cancel_requested"})
