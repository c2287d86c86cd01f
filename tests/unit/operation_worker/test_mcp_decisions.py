"""What the worker decides for an MCP tool's answers (DESIGN §7c): a lost answer with nothing
to reconcile through ends the operation for good and is never sent again; a task's new
status message is passed on as progress, once."""

from __future__ import annotations

from datetime import UTC, datetime

from libs.domain import OperationState, OpStatus, operation
from libs.events import OperationFailedFinal, OperationProgress
from libs.tools import AttemptResult, Lookup, ToolDeclaration
from services.operation_worker.domain import after_attempt
from services.operation_worker.stepping import Emit, Wait, after_poll, after_reconcile, attempted
from testkit.events import envelope

_NOW = datetime(2026, 1, 1, tzinfo=UTC)


class _Args:
    pass


def _state(**changes: object) -> OperationState:
    fields: dict[str, object] = {
        "operation_id": "op_1",
        "session_id": "s_1",
        "status": OpStatus.RUNNING,
        "tool": "add_note",
        "arguments": {},
        "idempotent": False,
        **changes,
    }
    return OperationState(**fields)  # type: ignore[arg-type]


def test_a_lost_answer_without_a_lookup_fails_for_good_and_is_not_resent() -> None:
    declaration = ToolDeclaration(
        name="add_note", description="", arguments=_Args, executor="mcp.desk.add_note",
        max_attempts=5,
    )
    result = AttemptResult("unknown_outcome", detail="no answer within 2 s")
    decision = after_attempt(
        _state(), declaration, result, now=_NOW, draw=0.5, budget_ok=True
    )
    assert decision.events == [
        OperationFailedFinal(reason="unknown_outcome", detail="no answer within 2 s")
    ]
    state = _state()
    record = attempted(1, result)
    assert record is not None
    for event in [record, *decision.events]:
        state = operation.evolve(state, envelope(event, operation_id="op_1"))
    assert state.status is OpStatus.FAILED_FINAL
    assert state.failure == "unknown_outcome: no answer within 2 s"


def test_a_task_s_new_status_message_is_progress_once() -> None:
    pending = Lookup("pending", provider_ref="task-1", detail="exported 1 of 3 parts")
    step = after_poll(pending, now=_NOW, recheck_s=0.2, last_progress="")
    assert step == Emit((OperationProgress(message="exported 1 of 3 parts"),), done=False)
    state = operation.evolve(
        _state(awaiting_async=True), envelope(step.events[0], operation_id="op_1")
    )
    assert state.last_progress == "exported 1 of 3 parts"
    again = after_poll(pending, now=_NOW, recheck_s=0.2, last_progress=state.last_progress)
    assert isinstance(again, Wait)
    # A tool completed by callback (no `last_progress`) is never noted from a poll.
    assert isinstance(after_poll(pending, now=_NOW, recheck_s=0.2), Wait)


def test_an_unknown_operation_that_cannot_be_looked_up_ends_unknown_outcome() -> None:
    found = Lookup("unknown", detail="no lookup tool declared, so it is not sent again")
    step = after_reconcile(_state(status=OpStatus.UNKNOWN), found, now=_NOW, recheck_s=0.2)
    assert isinstance(step, Emit)
    assert step.done
    (event,) = step.events
    assert isinstance(event, OperationFailedFinal)
    assert (event.reason, event.via) == ("unknown_outcome", "reconcile")
