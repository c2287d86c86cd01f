"""The tasks extension's words for a batch (pure): statuses, results, elicitations, ids."""

from __future__ import annotations

from datetime import UTC, datetime

from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.tools import default_registry
from services.interaction_surface.chat.conversation import pending_updates
from services.interaction_surface.mcp.tasks import (
    Member,
    TaskFacts,
    call_id,
    call_result,
    confirm_key,
    confirmed,
    task_id,
    task_result,
    task_view,
    wire_task,
)
from services.interaction_surface.mcp.tools import PENDING_TOOL, listed

AT = datetime(2026, 12, 24, 21, 0, tzinfo=UTC)


def facts(*members: Member, closing: str | None = None, progress: str | None = None) -> TaskFacts:
    return TaskFacts(
        batch_id="batch_1", created_at=AT, updated_at=AT, members=members,
        closing_text=closing, closing_status="pending" if closing else None, progress=progress,
    )


def member(status: str, prompt: str | None = None, op: str = "op_1") -> Member:
    return Member(operation_id=op, tool="transfer_money", status=status,
                  summary=f"transfer_money(...): {status}", prompt=prompt)


def test_running_members_are_working_with_the_latest_progress_as_message() -> None:
    view = task_view(facts(member("running"), progress="halfway there"))
    assert view.status == "working"
    assert view.status_message == "halfway there"
    assert view.result is None
    assert view.input_requests is None


def test_without_progress_the_message_counts_what_finished() -> None:
    view = task_view(facts(member("committed", op="a"), member("running", op="b")))
    assert view.status == "working"
    assert view.status_message == "1 of 2 operations finished"


def test_a_member_awaiting_confirmation_asks_for_a_boolean_confirmed() -> None:
    view = task_view(facts(member("awaiting_confirmation", prompt="Send 12.00 EUR to bob?")))
    assert view.status == "input_required"
    assert view.input_requests is not None
    request = view.input_requests[confirm_key("op_1")]
    assert request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Send 12.00 EUR to bob?"
    schema = request["params"]["requestedSchema"]
    assert schema["properties"]["confirmed"]["type"] == "boolean"
    assert schema["required"] == ["confirmed"]


def test_a_decided_closing_completes_the_task_with_the_closing_and_the_facts() -> None:
    view = task_view(facts(member("committed"), closing="Done: 12.00 EUR to bob."))
    assert view.status == "completed"
    assert view.result == {
        "content": [{"type": "text", "text": "Done: 12.00 EUR to bob."}],
        "structuredContent": {
            "batch_id": "batch_1",
            "facts": [{"operation_id": "op_1", "tool": "transfer_money", "status": "committed",
                       "summary": "transfer_money(...): committed"}],
        },
        "isError": False,
    }


def test_is_error_only_when_no_member_succeeded() -> None:
    failed = call_result("x", "b", [member("failed_final", op="a"), member("rejected", op="b")])
    mixed = call_result("x", "b", [member("failed_final", op="a"), member("committed", op="b")])
    assert failed["isError"] is True
    assert mixed["isError"] is False


def test_answers_yes_no_and_nonsense() -> None:
    assert confirmed({"action": "accept", "content": {"confirmed": True}}) is True
    assert confirmed({"action": "accept", "content": {"confirmed": False}}) is False
    assert confirmed({"action": "decline"}) is False
    assert confirmed({"action": "cancel"}) is False
    assert confirmed({"action": "accept", "content": {"confirmed": "yes"}}) is None
    assert confirmed({"action": "accept"}) is None
    assert confirmed("yes") is None


def test_task_ids_are_stable_keyed_and_distinct() -> None:
    assert task_id("sha256:a", "batch_1") == task_id("sha256:a", "batch_1")
    assert task_id("sha256:a", "batch_1") != task_id("sha256:b", "batch_1")
    assert task_id("sha256:a", "batch_1") != task_id("sha256:a", "batch_2")
    assert "batch_1" not in task_id("sha256:a", "batch_1")


def test_call_ids_name_the_same_call_whatever_the_key_order() -> None:
    one = call_id("book_table", {"restaurant": "nobu", "date": "2026-12-24"}, tasked=True)
    two = call_id("book_table", {"date": "2026-12-24", "restaurant": "nobu"}, tasked=True)
    assert one == two
    assert one != call_id("book_table", {"restaurant": "nobu", "date": "2026-12-24"},
                          tasked=False)
    assert one != call_id("book_table", {"restaurant": "nobu", "date": "2026-12-25"},
                          tasked=True)


def test_the_wire_task_carries_the_payload_only_for_tasks_get() -> None:
    done = facts(member("committed"), closing="Done.")
    view = task_view(done)
    created = wire_task("task_x", view, done, with_payload=False)
    got = wire_task("task_x", view, done, with_payload=True)
    assert "result" not in created
    assert got["result"] == view.result
    assert got["taskId"] == "task_x"
    assert got["status"] == "completed"
    assert got["pollIntervalMs"] > 0


def test_tools_list_has_input_schemas_the_pending_tool_and_task_support_on_2025_11_25() -> None:
    registry = default_registry()
    modern = listed(registry, "concierge", "2026-07-28")
    legacy = listed(registry, "concierge", "2025-11-25")
    names = [t["name"] for t in modern]
    assert "provision_access" in names
    assert names[-1] == PENDING_TOOL
    assert all(t["inputSchema"]["type"] == "object" for t in modern)
    assert all("execution" not in t for t in modern)
    untasked = {PENDING_TOOL, "confirm_operation"}  # both answer at once
    assert {t["execution"]["taskSupport"] for t in legacy if t["name"] not in untasked} == {
        "optional"
    }
    assert all("execution" not in t for t in legacy if t["name"] in untasked)


def test_a_task_result_is_never_a_pending_update_nor_attached_to_a_chat_reply() -> None:
    def waiting(turn_id: str) -> DeliveryState:
        return DeliveryState(
            delivery_id=f"d-{turn_id}", session_id="s", batch_id="b", kind="final",
            status=DeliveryStatus.WAITING, decision="attach_next_turn", priority="normal",
            text="Done.", short_text="Done.", turn_id=turn_id,
        )

    shown = pending_updates([waiting("mcpt_1"), waiting("mcpc_1"), waiting("turn_1")])
    assert [u.delivery_id for u in shown] == ["d-mcpc_1", "d-turn_1"]
    assert task_result("mcpt_1")
    assert not task_result(None)
