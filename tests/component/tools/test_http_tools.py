"""HTTP tools declared in a file commit once, whatever the API answers (DESIGN §7b).

Real broker, a real worker and the example help-desk API as a real HTTP server; the API's
own ledger counts the effects per request token (the operation id).
"""

from __future__ import annotations

import time

import httpx

from examples.deskapi.app import sign as desk_sign
from libs.events import OperationAttempted, OperationCommitted, OperationRetryScheduled
from libs.signing import sign
from testkit.desk import SECRET, DeskFactory, DeskStack
from testkit.ops_stack import attempts, types
from testkit.surface import eventually

TICKET = {"project": "acme/billing", "title": "  Invoice PDF is blank  "}
REFUND = {"order_id": "ana:1001", "amount": 1500, "reason": "damaged"}


async def _ticket(stack: DeskStack, arguments: dict[str, object]) -> tuple[str, str]:
    ctx = stack.ops.turn()
    turn = await stack.ops.admit(ctx, ("open_ticket", arguments))
    outcome = turn.outcomes[0]
    assert outcome.status == "admitted", outcome
    return ctx.session_id, outcome.operation_id


async def test_retryable_answers_are_retried_and_commit_once(desk_stack: DeskFactory) -> None:
    stack = await desk_stack()
    # Two 503s, then the real answer.
    await stack.fault(path="/tickets", status=503, times=2)
    session, op = await _ticket(stack, TICKET)
    state = await stack.ops.wait_status(session, op, "committed")
    _, events = await stack.ops.operation(session, op)
    tried = attempts(events)
    assert [(t.outcome, t.http_status) for t in tried[:2]] == [("server_error", 503)] * 2
    # The successful try is recorded once, in the commit it decided.
    assert (tried[-1].outcome, tried[-1].http_status) == ("success", 201)
    assert isinstance(tried[-1].env.event, OperationCommitted)
    assert [t.attempt for t in tried] == list(range(1, len(tried) + 1))
    assert types(events).count("operation.attempted") == len(tried) - 1
    assert types(events).count("operation.retry_scheduled") >= 2
    assert await stack.effects(op) == 1
    # Normalised by role before the intent key: the tenant qualifier goes, text is trimmed.
    assert state.arguments == {
        "project": "billing",
        "title": "Invoice PDF is blank",
        "severity": "normal",
    }
    assert state.result is not None
    assert state.result["id"].startswith("T-")

    # 429 with Retry-After: 1 — the next try waits at least that long.
    await stack.fault(path="/tickets", status=429, retry_after_s=1, times=1)
    session, op = await _ticket(stack, {"project": "billing", "title": "Second ticket"})
    await stack.ops.wait_status(session, op, "committed")
    _, events = await stack.ops.operation(session, op)
    retry = next(e for e in events if isinstance(e.event, OperationRetryScheduled))
    assert isinstance(retry.event, OperationRetryScheduled)
    assert (retry.event.retry_at - retry.occurred_at).total_seconds() >= 0.99
    tried = attempts(events)
    assert [t.http_status for t in tried] == [429, 201]
    assert (tried[1].env.occurred_at - tried[0].env.occurred_at).total_seconds() >= 0.99
    assert await stack.effects(op) == 1
    assert await stack.all_effects() == 2


async def test_timeout_after_commit_is_looked_up_not_resent(desk_stack: DeskFactory) -> None:
    stack = await desk_stack()
    # The API commits, then answers after the attempt timeout (2 s x 0.2 in tests) has passed.
    await stack.fault(path="/tickets", hang_after_commit_s=3, times=1)
    session, op = await _ticket(stack, TICKET)
    state = await stack.ops.wait_status(session, op, "committed")
    _, events = await stack.ops.operation(session, op)
    kinds = types(events)
    assert "operation.unknown" in kinds
    assert kinds.index("operation.unknown") < kinds.index("operation.committed")
    # Reconciled through http.lookup: one POST, one effect in the API's own ledger.
    assert kinds.count("operation.started") == 1
    assert events[-1].event.via == "reconcile"  # type: ignore[union-attr]
    assert await stack.effects(op) == 1
    assert state.result is not None
    assert state.result["request_token"] == op


async def test_async_refund_commits_once_from_a_duplicated_webhook(
    desk_stack: DeskFactory,
) -> None:
    stack = await desk_stack({"DESK_WEBHOOK_COPIES": "2"})
    ctx = stack.ops.turn()
    turn = await stack.ops.admit(ctx, ("refund_order", REFUND))
    op = turn.outcomes[0].operation_id
    await stack.ops.wait_status(ctx.session_id, op, "committed")

    async def both_delivered() -> list[dict[str, object]] | None:
        sent = (await stack.desk_get("/admin/activity"))["webhooks"]
        return sent if len(sent) == 2 else None

    webhooks = await eventually(both_delivered)
    assert [w["status"] for w in webhooks] == [200, 200]
    _, events = await stack.ops.operation(ctx.session_id, op)
    committed = [e for e in events if isinstance(e.event, OperationCommitted)]
    assert len(committed) == 1
    assert committed[0].event.via == "callback"
    attempted = [e.event for e in events if isinstance(e.event, OperationAttempted)]
    assert [a.outcome for a in attempted] == ["accepted_async"]
    assert await stack.effects(op) == 1

    # Callbacks the worker must not apply: problem+json, nothing appended.
    before = len(events)
    body = b'{"request_token": "%s", "refund": {"id": "R-1", "status": "settled"}}' % op.encode()
    stamp = int(time.time())
    async with httpx.AsyncClient(base_url=stack.worker_url) as client:
        forged = await client.post(
            "/v1/callbacks/http.refund_order",
            content=body,
            headers={"X-Desk-Timestamp": str(stamp), "X-Desk-Signature": "sha256=" + "0" * 64},
        )
        unsigned = await client.post("/v1/callbacks/payouts", content=body)
        # A sandbox signature is not the help desk's.
        wrong_scheme = await client.post(
            "/v1/callbacks/http.refund_order",
            content=body,
            headers={
                "X-Desk-Timestamp": str(stamp),
                "X-Desk-Signature": sign(b"holdline-dev-callback-secret", stamp, body),
            },
        )
        unknown = await client.post("/v1/callbacks/nobody", content=body)
        # Signed right for the payouts executor, but about a refund: not its operation.
        foreign_body = b'{"request_token": "%s", "payout": {"id": "P-9", "status": "paid"}}' % (
            op.encode()
        )
        foreign = await client.post(
            "/v1/callbacks/payouts",
            content=foreign_body,
            headers={
                "X-Desk-Timestamp": str(stamp),
                "X-Desk-Signature": desk_sign(SECRET.encode(), stamp, foreign_body),
            },
        )
    for answer in (forged, unsigned, wrong_scheme):
        assert answer.status_code == 401
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["type"].endswith("/bad-signature")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")
    assert foreign.status_code == 422
    assert foreign.json()["type"].endswith("/foreign-operation")
    _, events = await stack.ops.operation(ctx.session_id, op)
    assert len(events) == before


async def test_cancel_while_pending_cancels_at_the_api(desk_stack: DeskFactory) -> None:
    stack = await desk_stack()
    # This refund would settle only after a minute: time to change one's mind.
    await stack.fault(path="/refunds", settle_s=60, times=1)
    ctx = stack.ops.turn()
    turn = await stack.ops.admit(ctx, ("refund_order", REFUND))
    op = turn.outcomes[0].operation_id
    await stack.ops.wait_async_pending(ctx.session_id, op)
    assert stack.ops.admission is not None
    asked = await stack.ops.admission.request_cancel(ctx, op, reason="changed my mind")
    assert asked.status == "cancel_requested"
    state = await stack.ops.wait_status(ctx.session_id, op, "cancelled")
    assert state.status.value == "cancelled"

    async def nothing_pending() -> bool:
        return (await stack.desk_get("/admin/activity"))["pending"] == 0

    # The API's completion is gone with the cancel: no effect can follow.
    await eventually(nothing_pending)
    record = await stack.desk_get(f"/refunds/by-token/{op}")
    assert record["status"] == "cancelled"
    assert await stack.effects(op) == 0
    assert (await stack.desk_get("/admin/activity"))["webhooks"] == []
    _, events = await stack.ops.operation(ctx.session_id, op)
    assert "operation.committed" not in types(events)
