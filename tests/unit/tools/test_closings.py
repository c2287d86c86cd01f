"""A closing is worded from the declarations: the tool's own success line and label."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from libs.config import ToolSettings
from libs.domain import OperationState, OpStatus
from libs.models import TemplateModel
from libs.tools import DeclarationError, default_registry
from services.batch_coordinator.domain import outcome_of, template_summary
from services.interaction_surface.chat.conversation import tool_spec
from testkit.desk import SECRET, TOOLS_FILE
from testkit.tools_file import GOOD, tools_file


def _state(tool: str, arguments: dict[str, object], result: dict[str, object]) -> OperationState:
    return OperationState(
        operation_id=f"op_{tool}",
        session_id="s",
        status=OpStatus.COMMITTED,
        tool=tool,
        arguments=dict(arguments),
        result=dict(result),
    )


def test_closings_use_each_tools_own_words(monkeypatch: pytest.MonkeyPatch) -> None:
    # The tools file names this variable itself (`secret_env`) and reads it as it loads.
    monkeypatch.setenv("DESK_WEBHOOK_SECRET", SECRET)
    tools = ToolSettings(modules=("examples.payouts",), tools_file=str(TOOLS_FILE))
    registry = default_registry(settings=tools)
    members = [
        _state("open_ticket", {"project": "billing", "title": "Blank PDF"}, {"id": "T-4"}),
        _state("send_payout", {"payee": "bob", "amount": 2500, "account_id": "ana"}, {"id": "P-2"}),
        _state("provision_access", {"access": "github"}, {"id": "a1"}),
        # A result without the field its template names falls back to the label.
        _state("refund_order", {"order_id": "ana-1", "amount": 5}, {}),
    ]
    outcomes = [outcome_of(m.operation_id, "committed", m, registry.tool(m.tool)) for m in members]
    assert template_summary(outcomes, "en") == (
        "All done: github and refund of order ana-1. "
        "Ticket T-4 is open in billing. Payout P-2 of 25.00 to bob is paid."
    )
    assert [o.label for o in outcomes] == [
        "Blank PDF (billing)",
        "25.00 to bob",
        "github",
        "refund of order ana-1",
    ]


@pytest.mark.parametrize(
    ("tool", "arguments", "label"),
    [
        ("provision_access", {"access": "github"}, "github"),
        ("revoke_access", {"access_id": "a1", "access": "github"}, "github"),
        (
            "book_table",
            {"restaurant": "casa", "date": "2026-12-24", "time": "21:00"},
            "casa 2026-12-24 21:00",
        ),
        ("cancel_booking", {"booking_id": "b1", "restaurant": "casa"}, "casa"),
        ("check_availability", {"restaurant": "casa", "date": "2026-12-24"}, "casa 2026-12-24"),
        (
            "transfer_money",
            {
                "to_account": "bob-main",
                "amount_cents": 5000,
                "currency": "EUR",
                "from_account": "main",
            },
            "50.00 EUR to bob-main",
        ),
        # A rejected operation keeps no arguments: its tool's name.
        ("transfer_money", {}, "transfer_money"),
    ],
)
def test_the_demo_tools_declare_their_labels(
    tool: str, arguments: dict[str, object], label: str
) -> None:
    assert default_registry().label(tool, arguments) == label


def test_a_file_tool_is_offered_to_models_with_its_json_schema(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DESK_WEBHOOK_SECRET", SECRET)
    tools = ToolSettings(tools_file=str(TOOLS_FILE))
    spec = tool_spec(default_registry(settings=tools).tool("refund_order"))
    assert spec.cancellable
    assert spec.parameters["required"] == ["order_id", "amount"]
    assert spec.parameters["additionalProperties"] is False
    assert spec.parameters["properties"]["amount"] == {"type": "integer", "minimum": 1}


async def test_a_failure_is_worded_by_the_tools_own_failure_template(tmp_path: Path) -> None:
    text = GOOD.replace(
        'closing = "Ticket {result.id} is open."',
        'closing = "Ticket {result.id} is open."\n'
        'failure = "No ticket for {project}: {detail}."',
    )
    path = tools_file(tmp_path, text)
    registry = default_registry(settings=ToolSettings(demo=False, tools_file=str(path)))
    declaration = registry.tool("open_ticket")
    state = _state("open_ticket", {"project": "billing", "title": "Blank PDF"}, {})
    failed = dataclasses.replace(state, status=OpStatus.FAILED_FINAL, failure="quota: full")
    outcome = outcome_of(state.operation_id, "failed_final", failed, declaration)
    assert outcome.line == "No ticket for billing: full."
    # No model configured: the template model says the tool's own words.
    words = await TemplateModel().explain_failures([outcome], language="en")
    assert words.startswith("No ticket for billing: full.")
    assert "I could not complete" not in words
    # Without the template, the core's own words.
    plain = dataclasses.replace(outcome, line="")
    assert "I could not complete" in await TemplateModel().explain_failures([plain], language="en")


def test_a_failure_template_may_name_only_arguments_and_detail(tmp_path: Path) -> None:
    text = GOOD.replace('closing = "Ticket {result.id} is open."', 'failure = "{result.id}"')
    path = tools_file(tmp_path, text)
    with pytest.raises(DeclarationError, match=r"failure: \{result.id\} is not a field"):
        default_registry(settings=ToolSettings(demo=False, tools_file=str(path)))
