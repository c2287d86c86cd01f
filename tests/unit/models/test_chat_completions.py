"""The Chat Completions adapter against a local server speaking the protocol as vLLM and
Ollama do, then end to end: `HOLDLINE_MODEL=chat-completions` in the real services."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from libs.config import ModelSettings
from libs.models import ChatCompletionsModel, get_model
from libs.models.interface import AdmissionNote, ChatMessage, ModelError, OperationOutcome
from libs.models.streaming import RetryPolicy
from testkit.models.fake_chat_completions import (
    Call,
    FakeChatCompletions,
    Flavour,
    Script,
    completion,
)
from testkit.models.fake_server import running
from testkit.models.turns import BOOKING, CLAIMS, LIVE, TRANSFER, calls_of, turn

FAST = RetryPolicy(max_retries=2, initial_delay_s=0.05, max_delay_s=0.2, min_attempt_s=0.1)
BOOK = {"restaurant": "casa-pepe", "date": "2025-06-12", "time": "21:00", "party_size": 2}


@pytest.fixture
def fake() -> Iterator[FakeChatCompletions]:
    yield from running(FakeChatCompletions())


@pytest.fixture
async def model(fake: FakeChatCompletions) -> AsyncIterator[ChatCompletionsModel]:
    adapter = ChatCompletionsModel(
        base_url=fake.base_url, model="qwen-test", api_key="local-key", timeout_s=2.0,
        retry=FAST,
    )
    yield adapter
    await adapter.aclose()


async def test_the_request_it_sends(fake: FakeChatCompletions, model: ChatCompletionsModel) -> None:
    fake.script = Script(completion("Hello!"))
    history = [ChatMessage("user", "hi"), ChatMessage("assistant", "Hello."),
               ChatMessage("assistant", "Anything else?")]
    reply = await model.respond(turn("what can you do?", live=LIVE, history=history))
    assert reply.text == "Hello!"
    sent = fake.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["Authorization"] == "Bearer local-key"
    body = sent["body"]
    assert (body["model"], body["stream"], body["parallel_tool_calls"]) == ("qwen-test", True, True)
    assert [t["function"]["name"] for t in body["tools"]] == [
        "provision_access", "book_table", "transfer_money", "check_availability",
        "cancel_book_table", "confirm_operation", "undo_operation",
    ]
    assert all(t["type"] == "function" for t in body["tools"])
    # One system message first (strict chat templates), roles alternating after it.
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user"]
    assert body["messages"][2]["content"] == "Hello.\n\nAnything else?"
    system = body["messages"][0]["content"]
    assert "Today is 2025-06-11." in system
    assert "asks: Please confirm transfer_money" in system
    assert body["messages"][-1]["content"] == "what can you do?"


@pytest.mark.parametrize("flavour", ["vllm", "ollama"])
async def test_parallel_tool_calls_in_pieces(
    fake: FakeChatCompletions, model: ChatCompletionsModel, flavour: Flavour
) -> None:
    calls = [Call("provision_access", {"accesses": ["github", "jira"]}, "call_a"),
             Call("book_table", BOOK, "call_b")]
    fake.script = Script(completion("Done! All booked.", calls, flavour=flavour, pieces=4,
                                    interleave=True))
    request = turn("github and jira, and a table at casa pepe tomorrow at 21:00")
    reply = await model.respond(request)
    assert calls_of(reply) == [("provision_access", {"accesses": ["github", "jira"]}),
                               ("book_table", BOOK)]
    assert [c.call_id for c in reply.calls] == ["call_a", "call_b"]
    # The model's own words could claim what only the system of record may confirm.
    assert reply.text == ""
    notes = [AdmissionNote("op-1", "provision_access", "admitted", "github"),
             AdmissionNote("op-2", "book_table", "admitted", "casa-pepe 2025-06-12 21:00")]
    accepted = await model.accept(request, reply, notes)
    assert accepted.startswith("I'm on it")
    assert not CLAIMS.search(accepted)


async def test_servers_that_bend_the_format(
    fake: FakeChatCompletions, model: ChatCompletionsModel
) -> None:
    # No index on the pieces (a new id starts a call), arguments as an object, no [DONE].
    chunk: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "created": 1,
                             "model": "m"}
    pieces = [
        {"id": "call_1", "type": "function",
         "function": {"name": "check_availability", "arguments": '{"restaurant": '}},
        {"function": {"arguments": '"lhardy", "date": "2025-06-13"}'}},
        {"id": "call_2", "type": "function",
         "function": {"name": "check_availability",
                      "arguments": {"restaurant": "casa-pepe", "date": "2025-06-13"}}},
    ]
    chunks = [{**chunk, "choices": [{"index": 0, "delta": {"tool_calls": [p]}}]} for p in pieces]
    chunks.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    fake.script = Script(chunks, done=False)
    reply = await model.respond(turn("is anything free on friday?"))
    assert calls_of(reply) == [
        ("check_availability", {"restaurant": "lhardy", "date": "2025-06-13"}),
        ("check_availability", {"restaurant": "casa-pepe", "date": "2025-06-13"}),
    ]


async def test_malformed_unknown_and_cut_calls_admit_nothing(
    fake: FakeChatCompletions, model: ChatCompletionsModel
) -> None:
    fake.script = Script(completion(calls=[
        Call("book_table", '{"restaurant": "casa-pepe", "time": ', "c1"),
        Call("launch_rocket", {"target": "moon"}, "c2"),
    ]))
    reply = await model.respond(turn("book it and launch it"))
    assert reply.calls == ()
    assert reply.dropped[0].startswith("book_table: arguments are not valid JSON")
    assert reply.dropped[1] == "launch_rocket: unknown function"
    assert reply.text.startswith("Sorry, I couldn't act on that")
    # Cut by the length limit: the calls may be incomplete, so none is used.
    fake.script = Script(completion(calls=[Call("provision_access", {"accesses": ["x"]}, "c")],
                                    finish="length"))
    reply = await model.respond(turn("give me x"))
    assert reply.calls == ()
    assert reply.dropped == ("provision_access: the answer was cut at the length limit",)
    # The connection closes mid tool call (no finish, body cut): an error, never retried.
    chunks = completion(calls=[Call("provision_access", {"accesses": ["github"]}, "c")])
    fake.script = Script(chunks, cut_after=len(chunks) - 2)
    before = len(fake.requests)
    with pytest.raises(ModelError, match="stream broke"):
        await model.respond(turn("github please"))
    assert len(fake.requests) == before + 1
    # The stream ends cleanly but before any finish: also an error.
    fake.script = Script(chunks[:-1], done=False)
    with pytest.raises(ModelError, match="ended before the answer finished"):
        await model.respond(turn("github please"))


async def test_explicit_requests_and_pending_updates(
    fake: FakeChatCompletions, model: ChatCompletionsModel
) -> None:
    fake.script = Script(completion(calls=[
        Call("cancel_book_table", {"operation_id": BOOKING.operation_id}, "c1"),
        Call("confirm_operation", {"operation_id": TRANSFER.operation_id, "yes": True}, "c2"),
    ]))
    reply = await model.respond(turn("cancel the booking and yes to the transfer", live=LIVE))
    assert reply.cancels == (BOOKING.operation_id,)
    assert reply.confirmations == ((TRANSFER.operation_id, True),)


@pytest.mark.parametrize(
    ("script", "match"),
    [
        (Script(status=400, error_body='{"object": "error", "message": "tools need '
                '--enable-auto-tool-choice", "type": "BadRequestError", "code": 400}'),
         "HTTP 400.*enable-auto-tool-choice"),
        (Script([{"error": {"message": "CUDA out of memory", "type": "InternalServerError",
                            "code": 500}}]), "CUDA out of memory"),
        (Script(completion(finish="stop")), "neither text nor tool calls"),
    ],
)
async def test_errors_are_model_errors(
    fake: FakeChatCompletions, model: ChatCompletionsModel, script: Script, match: str
) -> None:
    fake.script = script
    with pytest.raises(ModelError, match=match):
        await model.respond(turn("hello"))


async def test_retries_and_giving_up_early(
    fake: FakeChatCompletions, model: ChatCompletionsModel
) -> None:
    fake.queue = [Script(status=503, error_body='{"error": {"message": "loading model"}}',
                         headers={"Retry-After": "0.2"}), Script(drop=True)]
    fake.script = Script(completion("Hi."))
    assert (await model.respond(turn("hello"))).text == "Hi."
    assert len(fake.requests) == 3
    assert fake.times[1] - fake.times[0] >= 0.2
    fake.queue = [Script(status=429, headers={"retry-after-ms": "5000"})]
    started = time.monotonic()
    with pytest.raises(ModelError, match="would not finish"):
        await model.respond(turn("hello"))
    # Well inside the adapter's 2 s budget: the 5 s wait was never started.
    assert time.monotonic() - started < 1.5


async def test_failure_explanation(fake: FakeChatCompletions, model: ChatCompletionsModel) -> None:
    fake.script = Script(completion("github worked; slack was refused. Ask IT."))
    outcomes = [OperationOutcome("op-1", "provision_access", "github", "committed"),
                OperationOutcome("op-2", "provision_access", "slack", "failed_final", "forbidden")]
    assert await model.explain_failures(outcomes, language="en") == (
        "github worked; slack was refused. Ask IT."
    )
    assert "tools" not in fake.last_body


def test_configured_by_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOLDLINE_MODEL_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="HOLDLINE_MODEL_BASE_URL"):
        get_model("chat-completions", ModelSettings.from_env())
    monkeypatch.setenv("HOLDLINE_MODEL_BASE_URL", "http://127.0.0.1:11434/v1/")
    monkeypatch.setenv("HOLDLINE_MODEL_NAME", "llama3.1")
    monkeypatch.setenv("HOLDLINE_MODEL_TIMEOUT_S", "5")
    monkeypatch.setenv("HOLDLINE_MODEL_MAX_RETRIES", "1")
    model = get_model("chat-completions", ModelSettings.from_env())
    assert isinstance(model, ChatCompletionsModel)
    assert (model.base_url, model.model, model.timeout_s, model.retry.max_retries) == (
        "http://127.0.0.1:11434/v1", "llama3.1", 5.0, 1)
