"""The 2025-11-25 tasks API's words for a batch (pure): the same projection as `tasks.py`,
in the older protocol's shapes.

A 2025-11-25 client asks for a task with `tools/call {task: {ttl}}` and gets a
`CreateTaskResult {task}`; `tasks/get` answers a flat `Task`, `tasks/result` the call's
`CallToolResult` once the task is terminal, `tasks/list` the session's tasks a page at a
time, `tasks/cancel` the `Task` after the business cancel. The status comes from
`tasks.task_view`: a batch whose closing is decided is `completed`, `failed` when no member
succeeded (that spec counts an `isError` result as failed), `cancelled` when every member
was cancelled (a confirmed cancel, never a requested one). A confirmation is answered by
calling the `confirm_operation` tool, which the status message names: the stateless
transport has no back channel for a server's `elicitation/create` (docs/guides/mcp.md).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from ..agent.tool_formats import CONFIRM_TOOL
from .tasks import POLL_INTERVAL_MS, TTL_MS, Member, TaskFacts, TaskStatus, task_view

# The protocol version whose core spec has the tasks API (`execution.taskSupport`).
LEGACY_TASKS_VERSION = "2025-11-25"
# The `_meta` key that ties a message to its task, and the model's immediate tool result.
RELATED_TASK = "io.modelcontextprotocol/related-task"
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
# The server's `tasks` capability on a 2025-11-25 `initialize`.
CAPABILITY: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
# Statuses a task never leaves.
TERMINAL = frozenset({"completed", "failed", "cancelled"})
# Tasks in one `tasks/list` page.
PAGE_SIZE = 50


@dataclass(frozen=True, slots=True)
class LegacyView:
    """A task as a 2025-11-25 client sees it."""

    status: TaskStatus
    status_message: str | None
    # The call's `CallToolResult`, once terminal.
    result: dict[str, Any] | None = None


def confirm_instruction(member: Member) -> str:
    """How a 2025-11-25 client answers one confirmation: with the confirm tool."""
    prompt = member.prompt or f"Please confirm {member.tool}."
    return (
        f"{prompt} Ask the user, then call {CONFIRM_TOOL} with "
        f"operation_id={member.operation_id} and confirmed=true or false."
    )


def legacy_view(facts: TaskFacts) -> LegacyView:
    """The task's 2025-11-25 status, message and (once terminal) result."""
    view = task_view(facts)
    if view.result is not None:
        members = facts.members
        if members and all(m.status == "cancelled" for m in members):
            return LegacyView("cancelled", "Cancelled; tasks/result returns the closing.",
                              view.result)
        if view.result["isError"]:
            return LegacyView(
                "failed", "Finished and nothing succeeded; tasks/result says what happened.",
                view.result,
            )
        return LegacyView("completed", "Finished; tasks/result returns the result.",
                          view.result)
    if view.status == "input_required":
        waiting = [m for m in facts.members if m.status == "awaiting_confirmation"]
        return LegacyView("input_required", " ".join(confirm_instruction(m) for m in waiting))
    return LegacyView("working", view.status_message)


def wire_task(task: str, view: LegacyView, facts: TaskFacts) -> dict[str, Any]:
    """The 2025-11-25 `Task` object."""
    out: dict[str, Any] = {
        "taskId": task,
        "status": view.status,
        "createdAt": facts.created_at.isoformat(),
        "lastUpdatedAt": facts.updated_at.isoformat(),
        # The outcome is kept as long as the session's events, whatever ttl was asked
        # for: the spec lets the receiver override it and say the actual one.
        "ttl": TTL_MS,
        "pollInterval": POLL_INTERVAL_MS,
    }
    if view.status_message:
        out["statusMessage"] = view.status_message
    return out


def created(task: str, view: LegacyView, facts: TaskFacts, output: str) -> dict[str, Any]:
    """The `CreateTaskResult` of a task-augmented `tools/call`; admission's honest answer
    is the text a host may give its model at once."""
    return {"task": wire_task(task, view, facts), "_meta": {IMMEDIATE_RESPONSE: output}}


def payload(task: str, view: LegacyView) -> dict[str, Any]:
    """`tasks/result` of a terminal task: the call's `CallToolResult`, tied to its task."""
    if view.result is None:
        raise ValueError("only a terminal task has a result")
    return {**view.result, "_meta": {RELATED_TASK: {"taskId": task}}}


def cursor(offset: int) -> str:
    """The opaque `nextCursor` of a `tasks/list` page that starts at `offset`."""
    return base64.urlsafe_b64encode(f"tasks:{offset}".encode()).decode()


def offset_of(value: str | None) -> int | None:
    """Where a `tasks/list` cursor starts (0 without one); None for a cursor not ours."""
    if value is None:
        return 0
    try:
        kind, _, number = base64.urlsafe_b64decode(value.encode()).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if kind != "tasks" or not number.isdigit():
        return None
    return int(number)
