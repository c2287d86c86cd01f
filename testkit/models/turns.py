"""Shared builders for the model tests: the demo tools as offered and typical requests."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from libs.models.interface import (
    ChatMessage,
    LiveOperation,
    PendingUpdate,
    ToolSpec,
    TurnRequest,
)

# A Wednesday.
TODAY = "2025-06-11"

TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "provision_access",
        "Grant the user access to one or more tools or workspaces.",
        {
            "type": "object",
            "properties": {"accesses": {"type": "array", "items": {"type": "string"}}},
            "required": ["accesses"],
        },
    ),
    ToolSpec(
        "book_table",
        "Book a table at a restaurant for a date, time and party size.",
        {
            "type": "object",
            "properties": {
                "restaurant": {"type": "string"},
                "date": {"type": "string"},
                "time": {"type": "string"},
                "party_size": {"type": "integer"},
            },
            "required": ["restaurant", "date", "time"],
        },
        cancellable=True,
    ),
    ToolSpec(
        "transfer_money",
        "Transfer money to another account. Irreversible; needs the user's yes.",
        {
            "type": "object",
            "properties": {
                "to_account": {"type": "string"},
                "amount_cents": {"type": "integer"},
            },
            "required": ["to_account", "amount_cents"],
        },
    ),
    ToolSpec(
        "check_availability",
        "Check which times a restaurant has free on a date.",
        {
            "type": "object",
            "properties": {"restaurant": {"type": "string"}, "date": {"type": "string"}},
            "required": ["restaurant", "date"],
        },
    ),
)

GITHUB = LiveOperation("op-github", "provision_access", "committed", "github", {"access": "github"})
JIRA = LiveOperation("op-jira", "provision_access", "running", "jira", {"access": "jira"})
BOOKING = LiveOperation(
    "op-booking",
    "book_table",
    "running",
    "casa-pepe 2025-06-12 21:00",
    {"restaurant": "casa-pepe", "date": "2025-06-12", "time": "21:00", "party_size": 2},
)
TRANSFER = LiveOperation(
    "op-transfer",
    "transfer_money",
    "awaiting_confirmation",
    "50.00 EUR to bob-main",
    {"to_account": "bob-main", "amount_cents": 5000, "currency": "EUR", "from_account": "main"},
    prompt="Please confirm transfer_money (amount_cents=5000, to_account=bob-main).",
)
LIVE = (GITHUB, JIRA, BOOKING, TRANSFER)

# Words that claim an action is done: a reply given before any effect must not use them.
CLAIMS = re.compile(r"\b(done|completed?|finished|booked|granted|sent)\b", re.IGNORECASE)


def turn(
    text: str,
    *,
    language: str = "en",
    live: Sequence[LiveOperation] = (),
    pending: Sequence[PendingUpdate] = (),
    history: Sequence[ChatMessage] = (),
    today: str | None = TODAY,
    turn_id: str = "turn-1",
    tools: Sequence[ToolSpec] = TOOLS,
) -> TurnRequest:
    """A request for one turn, with the demo tools offered."""
    return TurnRequest(
        session_id="sess-1",
        turn_id=turn_id,
        agent="concierge",
        language=language,
        user_text=text,
        history=tuple(history),
        tools=tuple(tools),
        live_operations=tuple(live),
        pending_updates=tuple(pending),
        today=today,
    )


def calls_of(reply: Any) -> list[tuple[str, dict[str, Any]]]:
    """(tool, arguments) of each proposed call."""
    return [(c.tool, c.arguments) for c in reply.calls]
