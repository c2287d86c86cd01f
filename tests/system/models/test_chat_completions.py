"""A chat-completions model behind the real services: tool calls admitted, bad ones refused."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from testkit.models.fake_chat_completions import (
    Call,
    FakeChatCompletions,
    Script,
    completion,
)
from testkit.models.fake_server import running
from testkit.models.turns import CLAIMS
from testkit.processes import Broker
from testkit.surface import SurfaceStack, effects, eventually, open_chat, running_stack


@pytest.fixture(scope="module")
def served() -> Iterator[FakeChatCompletions]:
    yield from running(FakeChatCompletions())


@pytest.fixture(scope="module")
def stack(
    broker: Broker, tmp_path_factory: pytest.TempPathFactory, served: FakeChatCompletions
) -> Iterator[SurfaceStack]:
    env = {"HOLDLINE_MODEL": "chat-completions", "HOLDLINE_MODEL_BASE_URL": served.base_url,
           "HOLDLINE_MODEL_NAME": "qwen-test", "HOLDLINE_MODEL_MAX_RETRIES": "1"}
    with running_stack(broker.url, tmp_path_factory.mktemp("chat-completions"), "cc",
                       surface_env=env) as running:
        yield running


async def test_chat_turns_through_the_real_services(
    stack: SurfaceStack, served: FakeChatCompletions
) -> None:
    name = f"cc{uuid.uuid4().hex[:6]}"
    other = f"cc{uuid.uuid4().hex[:6]}"
    async with httpx.AsyncClient(base_url=stack.url, timeout=20) as client:
        chat = await open_chat(client)
        served.script = Script(completion(
            calls=[Call("provision_access", {"accesses": [name]}, "call_1")], pieces=5))
        answer = await chat.say(f"give me access to {name}")
        assert [(o["tool"], o["status"]) for o in answer["operations"]] == [
            ("provision_access", "admitted")]
        assert not CLAIMS.search(answer["reply"]["text"])
        assert served.last_body["messages"][-1]["content"] == f"give me access to {name}"
        assert await eventually(lambda: effects(stack, name), timeout_s=20) == 1
        # Malformed JSON, an unknown tool, a stream cut mid-call: each answers honestly
        # and starts nothing.
        for script, words in (
            (Script(completion(calls=[Call("provision_access", '{"accesses": ["' + other,
                                           "c2")])), "Sorry, I couldn't act on that"),
            (Script(completion(calls=[Call("grant_root", {"accesses": [other]}, "c3")])),
             "Sorry, I couldn't act on that"),
            (Script(completion(calls=[Call("provision_access", {"accesses": [other]}, "c4")]),
                    cut_after=3), "I have not started anything"),
        ):
            served.script = script
            answer = await chat.say(f"give me access to {other}")
            assert answer["operations"] == []
            assert words in answer["reply"]["text"]
        snapshot = await chat.snapshot()
        assert [o["tool"] for o in snapshot["operations"]] == ["provision_access"]
        assert await effects(stack, other) == 0
        assert await effects(stack, name) == 1
