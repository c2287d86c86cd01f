"""The 2025-11-25 tasks API's words for a batch (pure): statuses, the Task, the result, the
cursor, and which tools say they run as tasks."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from libs.tools import default_registry
from services.interaction_surface.mcp.legacy import with_capability
from services.interaction_surface.mcp.legacy_tasks import (
    IMMEDIATE_RESPONSE,
    RELATED_TASK,
    created,
    cursor,
    legacy_view,
    offset_of,
    payload,
    wire_task,
)
from services.interaction_surface.mcp.tasks import Member, TaskFacts
from services.interaction_surface.mcp.tools import listed

AT = datetime(2026, 12, 24, 21, 0, tzinfo=UTC)


def facts(*members: Member, closing: str | None = None, progress: str | None = None) -> TaskFacts:
    return TaskFacts(
        batch_id="batch_1", created_at=AT, updated_at=AT, members=members,
        closing_text=closing, closing_status="pending" if closing else None, progress=progress,
    )


def member(status: str, prompt: str | None = None, op: str = "op_1") -> Member:
    return Member(operation_id=op, tool="book_table", status=status,
                  summary=f"book_table(...): {status}", prompt=prompt)


def test_a_running_batch_is_working_with_its_progress() -> None:
    view = legacy_view(facts(member("running"), progress="asking the restaurant"))
    assert (view.status, view.status_message, view.result) == (
        "working", "asking the restaurant", None)


def test_a_confirmation_names_the_confirm_tool_and_the_operation() -> None:
    view = legacy_view(facts(member("awaiting_confirmation", prompt="Send 12.00 EUR?")))
    assert view.status == "input_required"
    assert view.status_message is not None
    assert view.status_message.startswith("Send 12.00 EUR?")
    assert "confirm_operation with operation_id=op_1 and confirmed=true or false" in (
        view.status_message)


def test_a_decided_closing_is_completed_failed_or_cancelled_by_what_the_members_came_to(
) -> None:
    done = legacy_view(facts(member("committed"), member("failed_final", op="b"),
                             closing="One booked, one not."))
    assert done.status == "completed"
    assert done.result is not None
    assert done.result["isError"] is False
    failed = legacy_view(facts(member("failed_final"), closing="Nothing booked."))
    assert failed.status == "failed"
    cancelled = legacy_view(facts(member("cancelled"), closing="Cancelled."))
    assert cancelled.status == "cancelled"
    # A cancel that came too late: what is done stays done, and the task says completed.
    late = legacy_view(facts(member("committed"), closing="Booked."))
    assert late.status == "completed"


def test_a_cancel_requested_but_not_confirmed_is_still_working() -> None:
    assert legacy_view(facts(member("cancel_requested"))).status == "working"


def test_the_task_and_the_created_result_carry_the_spec_fields() -> None:
    f = facts(member("running"))
    task = wire_task("task_1", legacy_view(f), f)
    assert set(task) == {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt",
                         "ttl", "pollInterval"}
    assert task["createdAt"] == AT.isoformat()
    answer = created("task_1", legacy_view(f), f, "Accepted: started.")
    assert answer["task"] == task
    assert answer["_meta"] == {IMMEDIATE_RESPONSE: "Accepted: started."}


def test_the_result_is_the_call_result_tied_to_its_task() -> None:
    view = legacy_view(facts(member("committed"), closing="Booked."))
    out = payload("task_1", view)
    assert out["content"] == [{"type": "text", "text": "Booked."}]
    assert out["_meta"] == {RELATED_TASK: {"taskId": "task_1"}}
    with pytest.raises(ValueError, match="only a terminal task"):
        payload("task_1", legacy_view(facts(member("running"))))


def test_cursors_round_trip_and_a_foreign_one_is_refused() -> None:
    assert offset_of(None) == 0
    assert offset_of(cursor(50)) == 50
    for foreign in ("not-ours", "", cursor(1).upper(), "dGFza3M6LTE="):  # "tasks:-1"
        assert offset_of(foreign) is None, foreign


def test_on_2025_11_25_the_tools_that_answer_at_once_do_not_offer_tasks() -> None:
    tools = {t["name"]: t for t in listed(default_registry(), "assistant", "2025-11-25")}
    assert tools["transfer_money"]["execution"] == {"taskSupport": "optional"}
    assert "execution" not in tools["confirm_operation"]
    assert "execution" not in tools["holdline_pending"]


def test_only_a_2025_11_25_initialize_declares_the_tasks_capability() -> None:
    hello = {"protocolVersion": "2025-11-25", "capabilities": {"tools": {}}}
    assert with_capability(hello) == {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {},
                         "tasks": {"list": {}, "cancel": {},
                                   "requests": {"tools": {"call": {}}}}},
    }
    older = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}}
    assert with_capability(older) == older
