"""The diagnosis of a timeline, on hand-written items."""

from __future__ import annotations

from typing import Any

from services.interaction_surface.core.diagnosis import diagnose


def _item(kind: str, at: int, data: dict[str, Any] | None = None, **ids: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "occurred_at": f"2026-01-01T00:00:{at:02d}+00:00",
        "data": data or {},
        **ids,
    }


def test_an_operation_that_outlived_a_barge_in_and_an_unknown_left_open() -> None:
    items = [
        _item("operation.admitted", 1, {"tool": "transfer_money"}, operation_id="t1",
              intent_key="ik-t1"),
        _item("operation.admitted", 1, {"tool": "book_table"}, operation_id="b1",
              intent_key="ik-b1"),
        _item("operation.started", 2, {"worker_id": "w1"}, operation_id="t1"),
        _item("operation.started", 2, {"worker_id": "w1"}, operation_id="b1"),
        _item("control.barge_in", 3, {"played_ms": 400, "unheard_ms": 900}),
        _item("operation.committed", 4, {}, operation_id="b1"),
        _item("operation.attempted", 5, {"outcome": "timeout_after_send"}, operation_id="t1"),
        _item("operation.unknown", 5, {"reason": "timeout"}, operation_id="t1"),
        # The worker died; another one picked the operation up and has not reconciled yet.
        _item("operation.started", 9, {"worker_id": "w2"}, operation_id="t1"),
    ]
    found = diagnose(items)
    assert found["answers"]["operation_ended_after_barge_in"]
    assert [(a["operation_id"], a["status"]) for a in found["after_barge_in"]] == [
        ("b1", "committed")
    ]
    assert found["answers"]["unknown_left_unresolved"]
    [unknown] = found["unknown"]
    assert (unknown["operation_id"], unknown["resolved"], unknown["workers"]) == ("t1", False, 2)


def test_a_closing_said_before_its_operation_ended_is_flagged() -> None:
    items = [
        _item("operation.admitted", 1, {"tool": "provision_access"}, operation_id="a1",
              intent_key="ik-a1"),
        _item("delivery.ready", 2, {"kind": "final", "source_operation_ids": ["a1"]},
              delivery_id="d1", batch_id="bt1"),
        _item("delivery.delivered", 3, {}, delivery_id="d1"),
        _item("operation.failed_final", 4, {"reason": "rejected"}, operation_id="a1"),
        _item("operation.unknown", 5, {"reason": "timeout"}, operation_id="a2"),
        _item("operation.reconciled", 6, {}, operation_id="a2"),
        _item("operation.committed", 7, {}, operation_id="a2"),
    ]
    found = diagnose(items)
    assert found["answers"]["closing_said_before_commit"]
    [closing] = found["unconfirmed_closings"]
    assert closing["said_before_terminal"] == ["a1"]
    assert closing["not_committed"] == ["a1"]
    assert not found["answers"]["unknown_left_unresolved"]
    assert found["unknown"][0]["resolution"] == "reconciled"
