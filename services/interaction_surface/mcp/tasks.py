"""The tasks extension's words for a batch (pure): task ids, statuses, results, elicitations.

A task *is* a batch of one `tools/call`: `working` while its operations run (the latest
progress as the status message), `input_required` while one awaits the user's yes (an
elicitation asking for a boolean `confirmed`), `completed` once the batch's closing is
decided (`delivery.ready`), with the closing as `content` and the facts as
`structuredContent`. A failed business operation is a completed task whose closing says
so; `isError` only when no member succeeded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# The turn id prefix of a tasked call's batch: its closing is the task's result (channel
# `mcp`), never said elsewhere. Stored in the batch's events, so every surface knows it.
TASKED_TURN = "mcpt_"
# The tool an untasked client calls to fetch (and acknowledge) the closings it missed.
PENDING_TOOL = "holdline_pending"
# How often a client is asked to poll `tasks/get`.
POLL_INTERVAL_MS = 250
# How long a task's outcome is kept: as long as the session's events, stated as a day.
TTL_MS = 24 * 3600 * 1000

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]

# Operation statuses that count as a member that succeeded.
SUCCEEDED = frozenset({"committed"})


def task_result(turn_id: str | None) -> bool:
    """Whether a closing (by its turn id) is an MCP task's result: never a pending update,
    never attached to a chat reply; only its `tasks/get` hands it out."""
    return (turn_id or "").startswith(TASKED_TURN)


def task_id(key: str, batch_id: str) -> str:
    """The task id of a batch: an HMAC of the batch id under the session's token hash, so
    stable across restarts and surfaces, and unguessable without the session's secret."""
    digest = hmac.new(key.encode(), batch_id.encode(), hashlib.sha256).hexdigest()
    return f"task_{digest[:40]}"


def call_id(tool: str, arguments: Mapping[str, Any], *, tasked: bool) -> str:
    """The tool_call_id of an MCP call: the same tool and arguments in a session are the same
    call, so a call re-issued after a lost stream joins the first one's answer (a tasked and
    an untasked call differ: one's closing is a task's result, the other's goes pending)."""
    canonical = json.dumps([tool, arguments, tasked], sort_keys=True, separators=(",", ":"))
    return "mcp." + hashlib.sha256(canonical.encode()).hexdigest()[:40]


def confirm_key(operation_id: str) -> str:
    """The `inputRequests` key of an operation's confirmation."""
    return f"confirm:{operation_id}"


@dataclass(frozen=True, slots=True)
class Member:
    """One operation of the task's batch, as the task shows it."""

    operation_id: str
    tool: str
    status: str
    summary: str
    # The confirmation prompt, while it awaits the user's yes.
    prompt: str | None = None


@dataclass(frozen=True, slots=True)
class TaskFacts:
    """What the session's events say about one batch (gathered by `projection.py`)."""

    batch_id: str
    created_at: datetime
    updated_at: datetime
    members: tuple[Member, ...]
    closing_text: str | None = None
    closing_status: str | None = None
    progress: str | None = None


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task as `tasks/get` shows it."""

    status: TaskStatus
    status_message: str | None
    result: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = field(default=None)


def call_result(text: str, batch_id: str, members: Sequence[Member]) -> dict[str, Any]:
    """A finished call's result: the closing, and the facts behind it."""
    facts = [
        {"operation_id": m.operation_id, "tool": m.tool, "status": m.status,
         "summary": m.summary}
        for m in members
    ]
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": {"batch_id": batch_id, "facts": facts},
        "isError": bool(members) and not any(m.status in SUCCEEDED for m in members),
    }


def elicitation(member: Member) -> dict[str, Any]:
    """The input request that asks the user to confirm one operation."""
    prompt = member.prompt or f"Please confirm {member.tool}."
    return {
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": prompt,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "confirmed": {
                        "type": "boolean",
                        "title": "Confirmed",
                        "description": f"Yes to do it ({member.tool}), no to drop it.",
                    }
                },
                "required": ["confirmed"],
            },
        },
    }


def task_view(facts: TaskFacts) -> TaskView:
    """The task's status and payload from its batch's facts."""
    if facts.closing_text is not None:
        return TaskView(
            status="completed",
            status_message=None,
            result=call_result(facts.closing_text, facts.batch_id, facts.members),
        )
    waiting = [m for m in facts.members if m.status == "awaiting_confirmation"]
    if waiting:
        return TaskView(
            status="input_required",
            status_message=" ".join(m.prompt or f"Confirm {m.tool}." for m in waiting),
            input_requests={confirm_key(m.operation_id): elicitation(m) for m in waiting},
        )
    if facts.progress:
        return TaskView(status="working", status_message=facts.progress)
    done = sum(1 for m in facts.members if m.status in _SETTLED)
    return TaskView(
        status="working", status_message=f"{done} of {len(facts.members)} operations finished"
    )


_SETTLED = frozenset({"committed", "failed_final", "cancelled", "rejected"})


def confirmed(response: Any) -> bool | None:
    """The user's answer in one `inputResponses` entry (an elicitation result): True, False,
    or None when it is no answer at all. `decline`/`cancel` are a no."""
    if not isinstance(response, Mapping):
        return None
    action = response.get("action")
    if action in ("decline", "cancel"):
        return False
    if action != "accept":
        return None
    content = response.get("content")
    if not isinstance(content, Mapping):
        return None
    value = content.get("confirmed")
    return value if isinstance(value, bool) else None


def wire_task(
    task: str, view: TaskView, facts: TaskFacts, *, with_payload: bool
) -> dict[str, Any]:
    """The flat task fields (and, for `tasks/get`, the status's payload) on the wire."""
    out: dict[str, Any] = {
        "taskId": task,
        "status": view.status,
        "createdAt": facts.created_at.isoformat(),
        "lastUpdatedAt": facts.updated_at.isoformat(),
        "ttlMs": TTL_MS,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if view.status_message:
        out["statusMessage"] = view.status_message
    if with_payload:
        if view.result is not None:
            out["result"] = view.result
        if view.input_requests is not None:
            out["inputRequests"] = view.input_requests
    return out
