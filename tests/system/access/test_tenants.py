"""Tenants cannot reach each other's resources through tool arguments."""

from __future__ import annotations

import json

import httpx

from libs.bus import Context
from libs.events import OPERATIONS, OperationRejected
from testkit.surface import SurfaceStack, effects, eventually, unique

from .stored import Stored, stored_messages
from .tenants import call_text, open_session


async def test_a_tenant_cannot_grant_book_or_move_another_tenants_resources(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    owner = await open_session(client, "globex")
    intruder = await open_session(client, "acme")
    vault = unique("vault")
    # globex's own grant goes through: the resource exists and belongs to globex.
    granted = await owner.say(call_text("provision_access", {"accesses": [f"globex/{vault}"]}))
    assert granted["operations"][0]["status"] == "admitted"
    restaurant = unique("bistro")
    attempts = [
        ("provision_access", {"accesses": [f"globex/{vault}"]}),
        ("provision_access", {"accesses": [f"globex:{vault}"]}),
        ("book_table", {"restaurant": f"globex/{restaurant}", "date": "2030-01-05",
                        "time": "20:00", "party_size": 2}),
        ("transfer_money", {"from_account": f"{owner.session_id}-main", "to_account": "acme",
                            "amount": 10}),
        ("transfer_money", {"from_account": "globex/main", "to_account": "acme", "amount": 10}),
    ]
    owners_op = granted["operations"][0]["operation_id"]
    for command in ("cancel", "undo"):
        answer = await intruder.say(f"{command} {owners_op}")
        # Not found from here, and the reply does not even name the other tenant's resource.
        assert [o["status"] for o in answer["operations"]] == ["unknown"], answer
        assert vault not in json.dumps(answer)
    rejected: list[str] = []
    for tool, arguments in attempts:
        answer = await intruder.say(call_text(tool, arguments))
        [operation] = answer["operations"]
        assert operation["status"] == "rejected", (tool, arguments, answer)
        rejected.append(operation["operation_id"])

    async def owner_committed() -> list[Stored] | None:
        stored = await stored_messages(stack.nats_url, stack.prefix)
        done = any(
            m.stream is Context.OPERATIONS
            and owner.session_id in m.subject
            and b'"operation.committed"' in m.data
            for m in stored
        )
        return stored if done else None

    stored = await eventually(owner_committed, timeout_s=20)
    intruders = [
        OPERATIONS.decode(m.data)
        for m in stored
        if m.stream is Context.OPERATIONS and intruder.session_id in m.subject
    ]
    # Each refusal is recorded with its reason, and nothing of the intruder ever ran.
    reasons = {e.operation_id: e.event for e in intruders}
    assert set(reasons) == set(rejected)
    for event in reasons.values():
        assert isinstance(event, OperationRejected)
        assert event.reason == "forbidden"
    assert [type(e.event).__name__ for e in intruders] == ["OperationRejected"] * len(rejected)
    assert not [m for m in stored if m.stream is Context.WORK and intruder.session_id in m.subject]
    owner_events = [
        type(OPERATIONS.decode(m.data).event).__name__
        for m in stored
        if m.stream is Context.OPERATIONS and owner.session_id in m.subject
    ]
    assert owner_events.count("OperationCommitted") == 1
    assert not [t for t in owner_events if "Cancel" in t or "Compensat" in t]
    # The provider saw only globex's own grant: one effect on the vault, none on the bistro.
    assert await effects(stack, vault) == 1
    assert await effects(stack, restaurant) == 0
    snapshot = await intruder.snapshot()
    assert {o["status"] for o in snapshot["operations"]} == {"rejected"}
