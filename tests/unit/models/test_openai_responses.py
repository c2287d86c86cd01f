"""The OpenAI Responses adapter against a local fake server speaking the SSE wire format."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import pytest

from libs.models import OpenAIResponsesModel
from libs.models.interface import (
    AdmissionNote,
    ChatMessage,
    ModelError,
    OperationOutcome,
    PendingUpdate,
)
from libs.models.streaming import RetryPolicy, retry_after_s
from testkit.models.fake_responses import (
    FakeResponses,
    Script,
    event,
    function_call,
    message,
    response_object,
    response_stream,
)
from testkit.models.fake_server import running
from testkit.models.turns import BOOKING, JIRA, LIVE, TRANSFER, calls_of, turn

CLAIMS = re.compile(r"\b(done|completed?|finished|booked|granted|sent)\b", re.IGNORECASE)


@pytest.fixture
def fake() -> Iterator[FakeResponses]:
    yield from running(FakeResponses())


@pytest.fixture
async def model(fake: FakeResponses) -> AsyncIterator[OpenAIResponsesModel]:
    adapter = OpenAIResponsesModel(
        api_key="test-key", model="gpt-test", base_url=fake.base_url, timeout_s=0.5
    )
    yield adapter
    await adapter.aclose()


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["name"] for t in body["tools"]]


async def test_text_answer_and_the_request_it_sent(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(response_stream(message("Hello! How can I help you today?")))
    history = [ChatMessage("user", "hi"), ChatMessage("assistant", "Hello.")]
    request = turn("what can you do?", live=LIVE, history=history)
    reply = await model.respond(request)
    assert reply.text == "Hello! How can I help you today?"
    assert not reply.has_requests
    assert reply.dropped == ()

    sent = fake.requests[-1]
    assert sent["path"] == "/v1/responses"
    assert sent["headers"]["Authorization"] == "Bearer test-key"
    body = sent["body"]
    assert body["model"] == "gpt-test"
    assert body["stream"] is True
    assert body["parallel_tool_calls"] is True
    # Every tool, cancel_<tool> for the cancellable ones only, and the explicit requests.
    assert tool_names(body) == [
        "provision_access",
        "book_table",
        "transfer_money",
        "check_availability",
        "cancel_book_table",
        "confirm_operation",
        "undo_operation",
    ]
    for tool in body["tools"]:
        assert tool["type"] == "function"
        assert tool["strict"] is False
        assert tool["parameters"]["type"] == "object"
    assert body["tools"][1]["parameters"]["required"] == ["restaurant", "date", "time"]
    cancel = body["tools"][4]["parameters"]
    assert cancel["required"] == ["operation_id"]

    roles = [item["role"] for item in body["input"]]
    assert roles == ["system", "user", "assistant", "developer", "user"]
    assert body["input"][-1]["content"] == "what can you do?"
    developer = body["input"][3]["content"]
    assert "Today is 2025-06-11." in developer
    for op in LIVE:
        assert f"{op.operation_id} · {op.tool} · {op.status}" in developer
    assert "asks: Please confirm transfer_money" in developer


async def test_live_context_is_for_this_turn_only(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(response_stream(message("Sure.")))
    await model.respond(turn("hello", live=(BOOKING,)))
    await model.respond(turn("hello again", history=[ChatMessage("user", "hello")]))
    first, second = (r["body"]["input"] for r in fake.requests)
    assert BOOKING.operation_id in first[-2]["content"]
    # The next turn carries the visible history only: no operations, no developer residue.
    assert [i["role"] for i in second] == ["system", "user", "developer", "user"]
    assert BOOKING.operation_id not in json.dumps(second)
    assert "No operations are in progress" in second[2]["content"]


async def test_parallel_tool_calls(fake: FakeResponses, model: OpenAIResponsesModel) -> None:
    fake.script = Script(
        response_stream(
            message("Done! Everything is booked.", index=0),
            function_call("provision_access", {"accesses": ["github", "jira"]}, "call_a", index=1),
            function_call(
                "book_table",
                {"restaurant": "casa-pepe", "date": "2025-06-12", "time": "21:00"},
                "call_b",
                index=2,
            ),
        )
    )
    request = turn("github and jira, and a table at Casa Pepe tomorrow at 21:00")
    reply = await model.respond(request)
    assert calls_of(reply) == [
        ("provision_access", {"accesses": ["github", "jira"]}),
        ("book_table", {"restaurant": "casa-pepe", "date": "2025-06-12", "time": "21:00"}),
    ]
    assert [c.call_id for c in reply.calls] == ["call_a", "call_b"]
    # The model's own words could claim what only the system of record may confirm.
    assert reply.text == ""
    notes = [
        AdmissionNote("op-1", "provision_access", "admitted", "github"),
        AdmissionNote("op-2", "provision_access", "admitted", "jira"),
        AdmissionNote("op-3", "book_table", "admitted", "casa-pepe 2025-06-12 21:00"),
    ]
    accepted = await model.accept(request, reply, notes)
    assert accepted.startswith("I'm on it: github, jira and casa-pepe 2025-06-12 21:00.")
    assert not CLAIMS.search(accepted)


async def test_a_tool_call_emitted_twice_is_proposed_twice(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    args = {"accesses": ["github"]}
    fake.script = Script(
        response_stream(
            function_call("provision_access", args, "call_1", index=0),
            function_call("provision_access", args, "call_2", index=1),
        )
    )
    reply = await model.respond(turn("give me access to github"))
    # The application dedups by intent, not the adapter by call id.
    assert calls_of(reply) == [("provision_access", args), ("provision_access", args)]
    assert [c.call_id for c in reply.calls] == ["call_1", "call_2"]


async def test_malformed_and_unknown_calls_are_dropped_with_a_reason(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(
        response_stream(
            function_call("book_table", '{"restaurant": "casa-pepe", "time": ', "call_1", 0),
            function_call("launch_rocket", {"target": "moon"}, "call_2", 1),
            function_call("provision_access", '["github"]', "call_3", 2),
            function_call("provision_access", {"accesses": ["jira"]}, "call_4", 3),
        )
    )
    reply = await model.respond(turn("do things"))
    assert calls_of(reply) == [("provision_access", {"accesses": ["jira"]})]
    assert len(reply.dropped) == 3
    assert reply.dropped[0].startswith("book_table: arguments are not valid JSON")
    assert reply.dropped[1] == "launch_rocket: unknown function"
    assert reply.dropped[2] == "provision_access: arguments are not a JSON object"


async def test_only_malformed_calls_still_answer_honestly(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(response_stream(function_call("book_table", "{oops", "c1", 0)))
    reply = await model.respond(turn("reserva", language="es"))
    assert reply.calls == ()
    assert reply.dropped
    assert reply.text.startswith("Perdona")


async def test_cancel_confirm_and_undo_functions(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    committed = JIRA.__class__(
        "op-github", "provision_access", "committed", "github", {"access": "github"}
    )
    live = (JIRA, BOOKING, TRANSFER, committed)
    fake.script = Script(
        response_stream(
            function_call("cancel_book_table", {"operation_id": BOOKING.operation_id}, "c1", 0),
            function_call("cancel_book_table", {"operation_id": BOOKING.operation_id}, "c2", 1),
            function_call(
                "confirm_operation", {"operation_id": TRANSFER.operation_id, "yes": False}, "c3", 2
            ),
            function_call("undo_operation", {"operation_id": "op-github"}, "c4", 3),
            # Not offered: transfer_money is not cancellable.
            function_call(
                "cancel_transfer_money", {"operation_id": TRANSFER.operation_id}, "c5", 4
            ),
            # Hallucinated and mismatched operations never reach the application.
            function_call("cancel_book_table", {"operation_id": "op-nope"}, "c6", 5),
            function_call("cancel_book_table", {"operation_id": JIRA.operation_id}, "c7", 6),
            function_call("confirm_operation", {"operation_id": TRANSFER.operation_id}, "c8", 7),
        )
    )
    reply = await model.respond(
        turn("cancel the booking, not the transfer, undo github", live=live)
    )
    assert reply.calls == ()
    assert reply.cancels == (BOOKING.operation_id,)
    assert reply.confirmations == ((TRANSFER.operation_id, False),)
    assert reply.compensations == ("op-github",)
    assert reply.dropped == (
        "cancel_transfer_money: unknown function",
        "cancel_book_table: unknown operation 'op-nope'",
        "cancel_book_table: operation op-jira is a provision_access, not a book_table",
        "confirm_operation: 'yes' must be true or false",
    )


async def test_pending_updates_go_first_and_are_attached(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(response_stream(message("The booking is still in progress.")))
    pending = (PendingUpdate("dlv-1", "Done: github and jira."),)
    reply = await model.respond(turn("how is it going?", live=(BOOKING,), pending=pending))
    assert reply.text == "Before that: Done: github and jira. The booking is still in progress."
    assert reply.attached == ("dlv-1",)
    developer = fake.last_body["input"][-2]["content"]
    assert "do not repeat them" in developer
    assert "- Done: github and jira." in developer


async def test_http_error_is_a_model_error(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(status=500, error_body='{"error": {"message": "boom"}}')
    with pytest.raises(ModelError, match=r"HTTP 500.*boom"):
        await model.respond(turn("hello"))
    fake.script = Script(status=429, error_body='{"error": {"message": "slow down"}}')
    with pytest.raises(ModelError, match="HTTP 429"):
        await model.respond(turn("hello"))


async def test_a_hang_past_the_timeout_is_a_model_error(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    # Headers and a first event arrive, then nothing: the whole answer has a deadline.
    fake.script = Script(response_stream(message("Thinking"), status=""), hang=True)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"within 0\.5 s"):
        await model.respond(turn("hello"))
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    ("events", "match"),
    [
        (
            [
                *response_stream(message("partial"), status=""),
                event(
                    "response.failed",
                    response=response_object(
                        "failed", error={"code": "server_error", "message": "overloaded"}
                    ),
                ),
            ],
            "server_error: overloaded",
        ),
        (
            [event("error", code="rate_limit_exceeded", message="too many", param=None)],
            "rate_limit_exceeded: too many",
        ),
        (response_stream(message("cut short"), status=""), "ended before response.completed"),
        (response_stream(status="completed"), "neither text nor tool calls"),
    ],
)
async def test_failed_streams_are_model_errors(
    fake: FakeResponses, model: OpenAIResponsesModel, events: list[dict[str, Any]], match: str
) -> None:
    fake.script = Script(events)
    with pytest.raises(ModelError, match=match):
        await model.respond(turn("hello"))


async def test_unreachable_server_is_a_model_error() -> None:
    adapter = OpenAIResponsesModel(api_key="k", base_url="http://127.0.0.1:9/v1", timeout_s=0.5)
    try:
        with pytest.raises(ModelError):
            await adapter.respond(turn("hello"))
    finally:
        await adapter.aclose()


async def test_output_only_in_the_completed_response(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    final = response_object(
        "completed",
        [
            {
                "type": "function_call",
                "call_id": "call_z",
                "name": "check_availability",
                "arguments": '{"restaurant": "casa-pepe", "date": "2025-06-13"}',
            },
            {
                "type": "function_call",
                "call_id": "call_y",
                "name": "check_availability",
                "arguments": '{"restaurant": "lhardy", "date": "2025-06-13"}',
            },
        ],
    )
    fake.script = Script([event("response.completed", response=final)])
    reply = await model.respond(turn("is Casa Pepe free on Friday?"))
    assert calls_of(reply) == [
        ("check_availability", {"restaurant": "casa-pepe", "date": "2025-06-13"}),
        ("check_availability", {"restaurant": "lhardy", "date": "2025-06-13"}),
    ]
    assert [c.call_id for c in reply.calls] == ["call_z", "call_y"]


async def test_spanish_turn_asks_for_spanish(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(
        response_stream(
            function_call(
                "transfer_money", {"to_account": "bob-main", "amount_cents": 5000}, "c1", 0
            )
        )
    )
    request = turn("transfiere 50 euros a bob-main", language="en")
    reply = await model.respond(request)
    assert "Answer briefly, in Spanish." in fake.last_body["input"][0]["content"]
    note = AdmissionNote("op-t", "transfer_money", "awaiting_confirmation", "50.00 EUR a bob-main")
    accepted = await model.accept(request, reply, [note])
    assert accepted == "50.00 EUR a bob-main necesita tu confirmación. ¿Lo hago? (sí/no)"


async def test_failure_explanation_uses_the_model(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    fake.script = Script(response_stream(message("github worked; slack was refused. Ask IT.")))
    outcomes = [
        OperationOutcome("op-1", "provision_access", "github", "committed"),
        OperationOutcome("op-2", "provision_access", "slack", "failed_final", "forbidden: no"),
    ]
    text = await model.explain_failures(outcomes, language="en")
    assert text == "github worked; slack was refused. Ask IT."
    body = fake.last_body
    assert "tools" not in body
    assert json.loads(body["input"][1]["content"])[1]["status"] == "failed_final"
    fake.script = Script(status=503)
    with pytest.raises(ModelError):
        await model.explain_failures(outcomes, language="es")


# ---------------------------------------------------------------- refusals and retries


async def test_a_refusal_only_in_the_final_response_is_the_answer(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    refusal = {
        "id": "msg_r", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "refusal", "refusal": "I can't help with moving that money."}],
    }
    fake.script = Script([event("response.completed",
                                response=response_object("completed", [refusal]))])
    reply = await model.respond(turn("move everything to an offshore account"))
    assert reply.text == "I can't help with moving that money."
    assert not reply.has_requests


async def test_streamed_refusal_deltas_are_the_answer(
    fake: FakeResponses, model: OpenAIResponsesModel
) -> None:
    events = [
        event("response.refusal.delta", item_id="msg_0", output_index=0, content_index=0,
              delta="I can't "),
        event("response.refusal.delta", item_id="msg_0", output_index=0, content_index=0,
              delta="do that."),
    ]
    fake.script = Script(response_stream(events))
    assert (await model.respond(turn("do something bad"))).text == "I can't do that."


FAST = RetryPolicy(max_retries=2, initial_delay_s=0.05, max_delay_s=0.2, min_attempt_s=0.1)


@pytest.fixture
async def retrying(fake: FakeResponses) -> AsyncIterator[OpenAIResponsesModel]:
    adapter = OpenAIResponsesModel(
        api_key="k", model="gpt-test", base_url=fake.base_url, timeout_s=3.0, retry=FAST
    )
    yield adapter
    await adapter.aclose()


async def test_a_blip_is_retried_after_the_delay_the_server_asks(
    fake: FakeResponses, retrying: OpenAIResponsesModel
) -> None:
    fake.queue = [
        Script(status=429, error_body='{"error": {"message": "slow down"}}',
               headers={"retry-after-ms": "300", "Retry-After": "9"}),
        Script(drop=True),  # then the connection fails once
    ]
    fake.script = Script(response_stream(message("Hello!")))
    reply = await retrying.respond(turn("hello"))
    assert reply.text == "Hello!"
    assert len(fake.requests) == 3
    # retry-after-ms wins over Retry-After; the dropped connection gets a short backoff.
    assert fake.times[1] - fake.times[0] >= 0.3
    assert fake.times[1] - fake.times[0] < 2
    assert fake.requests[0]["body"] == fake.requests[2]["body"]


@pytest.mark.parametrize("status", [408, 409, 500, 503])
async def test_retryable_statuses(
    fake: FakeResponses, retrying: OpenAIResponsesModel, status: int
) -> None:
    fake.queue = [Script(status=status, headers={"Retry-After": "0.1"})]
    fake.script = Script(response_stream(message("ok")))
    assert (await retrying.respond(turn("hello"))).text == "ok"
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    ("script", "attempts"),
    [
        (Script(status=400, error_body='{"error": {"message": "bad tools"}}'), 1),
        (Script(status=503, headers={"x-should-retry": "false"}), 1),
        (Script(status=401), 1),
        (Script(status=503, headers={"Retry-After": "0"}), 3),  # the retries run out
    ],
)
async def test_what_is_not_retried_or_runs_out(
    fake: FakeResponses, retrying: OpenAIResponsesModel, script: Script, attempts: int
) -> None:
    fake.script = script
    with pytest.raises(ModelError, match=f"HTTP {script.status}"):
        await retrying.respond(turn("hello"))
    assert len(fake.requests) == attempts


async def test_a_wait_past_the_turn_budget_gives_up_at_once(
    fake: FakeResponses, retrying: OpenAIResponsesModel
) -> None:
    fake.script = Script(status=429, error_body="{}", headers={"Retry-After": "2"})
    # The turn needs its answer within 1.5 s: waiting 2 s could only end in a late apology.
    request = replace(turn("hello"), deadline=time.monotonic() + 1.5)
    assert request.deadline is not None
    with pytest.raises(ModelError, match=r"retry in 2\.0 s would not finish"):
        await retrying.respond(request)
    # Given up before the deadline, not at it (nor 2 s later).
    assert time.monotonic() < request.deadline
    assert len(fake.requests) == 1
    # With room in the budget, the same answer is waited out.
    fake.queue = [Script(status=429, error_body="{}", headers={"Retry-After": "0.2"})]
    fake.script = Script(response_stream(message("there")))
    assert (await retrying.respond(turn("hello"))).text == "there"


async def test_a_stream_cut_after_it_began_is_not_retried(
    fake: FakeResponses, retrying: OpenAIResponsesModel
) -> None:
    fake.script = Script(response_stream(function_call(
        "provision_access", {"accesses": ["github"]}, "c1", 0), status=""))
    with pytest.raises(ModelError, match=r"ended before response\.completed"):
        await retrying.respond(turn("github please"))
    assert len(fake.requests) == 1


def test_retry_after_forms() -> None:
    assert retry_after_s({"retry-after-ms": "250"}) == 0.25
    assert retry_after_s({"retry-after": "3"}) == 3.0
    assert retry_after_s({"retry-after": "1.5"}) == 1.5
    assert retry_after_s({"retry-after": "soon"}) is None
    assert retry_after_s({}) is None
    when = format_datetime(datetime.fromtimestamp(1_000_010, UTC), usegmt=True)
    assert retry_after_s({"retry-after": when}, now=1_000_000) == pytest.approx(10)
