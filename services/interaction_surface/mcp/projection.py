"""Tasks as projections of the session's events: nothing about a task lives in a process.

A task id names one batch of the session (`tasks.task_id`, keyed by the session's token
hash); its status, prompts, progress and closing are read from the live view, which any
surface rebuilds by replay. A task id of another session, or one that names nothing, is
simply not found: both answer alike.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from libs.domain import BatchState, SessionState
from libs.events import (
    OperationAwaitingConfirmation,
    OperationProgress,
    ToolCallsReceived,
)

from ..agent.records import summary
from ..core.view import SurfaceView
from .tasks import TASKED_TURN, Member, TaskFacts, task_id

_KNOWN_MAX = 100_000


class Tasks:
    """Finds a session's tasks and gathers their facts from the live view."""

    def __init__(self, view: SurfaceView) -> None:
        self.view = view
        # (session, task id) -> batch id: derived from the events, so a cache, not state.
        self._known: dict[tuple[str, str], str] = {}

    def batch_of(self, session: SessionState, task: str) -> BatchState | None:
        """The session's batch a task id names (None: unknown, or another session's)."""
        known = self._known.get((session.session_id, task))
        if known is not None:
            return self.view.batches.get(known)
        for found in self.view.session_batches(session.session_id):
            if task_id(session.token_hash, found.batch_id) == task:
                if len(self._known) >= _KNOWN_MAX:
                    self._known.clear()  # bounded: anything dropped is found again
                self._known[(session.session_id, task)] = found.batch_id
                return found
        return None

    def facts(self, session: SessionState, batch: BatchState) -> TaskFacts:
        """What the session's events say about the batch, for `tasks.task_view`."""
        ops = [
            o for o in self.view.session_operations(session.session_id)
            if o.batch_id == batch.batch_id
        ]
        ids = {o.operation_id for o in ops}
        prompts: dict[str, str] = {}
        progress: str | None = None
        created = batch.opened_at
        updated = created
        found = self.view.log(session.session_id)
        for entry in found.entries if found is not None else []:
            env = entry.envelope
            if env.batch_id != batch.batch_id and env.operation_id not in ids:
                continue
            created = created or env.occurred_at
            updated = max(updated, env.occurred_at) if updated else env.occurred_at
            event = env.event
            if isinstance(event, OperationAwaitingConfirmation) and env.operation_id:
                prompts[env.operation_id] = event.prompt
            elif isinstance(event, OperationProgress):
                progress = event.message
        closing = None
        if batch.final_delivery_id is not None:
            closing = self.view.deliveries.get(batch.final_delivery_id)
        if closing is None:
            closing = next(
                (
                    d for d in self.view.session_deliveries(session.session_id)
                    if d.batch_id == batch.batch_id and d.kind == "final"
                ),
                None,
            )
        now = created or datetime.now().astimezone()
        return TaskFacts(
            batch_id=batch.batch_id,
            created_at=now,
            updated_at=updated or now,
            members=tuple(
                Member(
                    operation_id=o.operation_id, tool=o.tool, status=o.status.value,
                    summary=summary(o), prompt=prompts.get(o.operation_id),
                )
                for o in ops
            ),
            closing_text=closing.text if closing is not None else None,
            closing_status=closing.status.value if closing is not None else None,
            progress=progress,
        )

    def admitted(
        self, batch_id: str | None, operations: list[dict[str, Any]], now: datetime
    ) -> TaskFacts | None:
        """A batch's facts from admission's own answer, while the view has not read it yet:
        what a task shows when it is created (None: the view has it, or it waits for a yes,
        whose prompt only the events hold)."""
        if batch_id is None or self.view.batches.get(batch_id) is not None:
            return None
        if any(o["status"] == "awaiting_confirmation" for o in operations):
            return None
        members = tuple(
            Member(operation_id=o["operation_id"], tool=o["tool"], status=o["status"],
                   summary="")
            for o in operations if o.get("batch_id") == batch_id
        )
        return TaskFacts(batch_id=batch_id, created_at=now, updated_at=now, members=members)

    def tasked(self, batch_id: str | None) -> bool:
        """Whether a batch is an MCP task's (its closing is the task's result)."""
        if batch_id is None:
            return False
        found = self.view.batches.get(batch_id)
        return found is not None and (found.turn_id or "").startswith(TASKED_TURN)

    def answered_by_events(
        self, session: SessionState, tool_call_id: str
    ) -> dict[str, Any] | None:
        """A call's answer rebuilt from the session's events: the batch opened under the
        turn that recorded its `tool_call_id` (None: nothing was admitted for it yet)."""
        found = self.view.log(session.session_id)
        turns = {
            e.envelope.turn_id
            for e in (found.entries if found is not None else [])
            if isinstance(e.envelope.event, ToolCallsReceived)
            and tool_call_id in e.envelope.event.tool_call_ids
        }
        for batch in self.view.session_batches(session.session_id):
            if batch.turn_id in turns:
                ops = [
                    {"operation_id": o.operation_id, "tool": o.tool, "status": o.status.value,
                     "batch_id": o.batch_id}
                    for o in self.view.session_operations(session.session_id)
                    if o.batch_id == batch.batch_id
                ]
                output = "Already requested earlier; the result is reported when it is ready."
                return {"batch_id": batch.batch_id, "results": [
                    {"tool_call_id": tool_call_id, "output": output, "operations": ops}
                ]}
        return None
