"""The MCP tasks extension on the wire (`io.modelcontextprotocol/tasks`), for the `mcp` client.

Advertising `TasksSupport` tells a server that holdline drives tasks itself: a task-capable
tool then answers `tools/call` with a task (`resultType: "task"`) that the executor records
and polls through `tasks/get`, and cancels through `tasks/cancel`. Only the fields holdline
reads are modelled.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"
IDEMPOTENCY_KEY = "io.holdline/idempotency-key"
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class _TaskFields(mcp_types.Result):
    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(alias="taskId")
    status: TaskStatus
    status_message: str | None = Field(default=None, alias="statusMessage")
    poll_interval_ms: int | None = Field(default=None, alias="pollIntervalMs")


class CreatedTask(_TaskFields):
    """A `tools/call` the server runs as a task."""

    result_type: Literal["task"] = Field(alias="resultType")


class TaskState(_TaskFields):
    """A `tasks/get` answer: the task's status and, once terminal, its result or error."""

    result_type: Literal["complete"] = Field(alias="resultType")
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskParams(mcp_types.RequestParams):
    """The task a `tasks/get` or `tasks/cancel` is about."""

    model_config = ConfigDict(populate_by_name=True)

    task_id: str = Field(serialization_alias="taskId")


class GetTask(mcp_types.Request[TaskParams, Literal["tasks/get"]]):
    """`tasks/get`."""

    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"


class CancelTask(mcp_types.Request[TaskParams, Literal["tasks/cancel"]]):
    """`tasks/cancel`."""

    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


async def _never(created: CreatedTask, ctx: ClaimContext) -> mcp_types.CallToolResult:
    raise RuntimeError("holdline polls tasks itself (call_tool with allow_claimed=True)")


class TasksSupport(ClientExtension):
    """The tasks capability and its claimed result shape; the executor drives the task."""

    identifier = TASKS

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (
            ResultClaim(
                result_type="task",
                model=CreatedTask,
                resolve=_never,
                protocol_versions=frozenset(MODERN_PROTOCOL_VERSIONS),
            ),
        )
