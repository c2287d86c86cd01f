"""OpenAI Realtime on holdline: the example phone agent (`examples/openai_realtime_twilio.py`)
as its own process — the Agents SDK's real `RealtimeSession` and `RealtimeAgent`, pointed
with the model config's `url` at a local Realtime server (`testkit.realtime_model`, every
event checked against the `openai` package's types) whose model is scripted — called by
the project's Twilio-protocol phone, against holdline's real services."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.openai_realtime_local import run as run_local
from holdline.client import HoldlineClient, SessionClient
from testkit.phone import Phone
from testkit.processes import ROOT, free_port
from testkit.realtime_model import Line, RealtimeModelServer
from testkit.surface import SurfaceStack, effects, eventually, fault, unique

pytestmark = pytest.mark.timeout(90)

DELIVERY_KEY = "holdline_delivery_id"


class Agent:
    """The example agent process."""

    def __init__(self, holdline_url: str, realtime_url: str, log_path: Path) -> None:
        self.port = free_port()
        self.log_path = log_path
        # As a module from the worktree's root, so it imports this checkout's holdline.
        argv = [sys.executable, "-m", "examples.openai_realtime_twilio", "--port", str(self.port),
                "--holdline", holdline_url, "--realtime-url", realtime_url]
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    @property
    def url(self) -> str:
        """Where the phone dials."""
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until it answers its health check."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the agent exited: {self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError("the agent never answered")

    def kill9(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def running_agent(stack: SurfaceStack, realtime_url: str, logs: Path) -> Iterator[Agent]:
    """A started agent process, killed on exit."""
    agent = Agent(stack.url, realtime_url, logs / f"agent-{unique('a')}.log")
    try:
        agent.wait_ready()
        yield agent
    finally:
        agent.kill9()


@pytest.fixture(scope="module")
def realtime_port() -> int:
    """The port each test's Realtime server listens on, so one agent process serves them."""
    return free_port()


@pytest.fixture(scope="module")
def agent(
    stack: SurfaceStack, realtime_port: int, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Agent]:
    """One agent process for the tests that do not kill it (each call is a new session)."""
    url = f"ws://127.0.0.1:{realtime_port}/v1/realtime?model=gpt-realtime"
    with running_agent(stack, url, tmp_path_factory.mktemp("realtime")) as started:
        yield started


async def call(agent: Agent, session: SessionClient, server: RealtimeModelServer,
               index: int) -> tuple[Phone, Line]:
    """A call continuing `session`, and the Realtime connection the agent opened for it."""
    phone = Phone(agent.url, {"session_id": session.session_id, "token": session.token})
    await phone.dial()
    line = await server.line(index)
    await line.wait(lambda: line.events("session.update"))
    return phone, line


def asks_for(name: str) -> tuple[str, str]:
    """The model's call for access to `name`."""
    return "provision_access", json.dumps({"accesses": [name]})


def closings_asked(line: Line) -> list[Any]:
    """The `response.create`s the adapter sent to say a holdline closing."""
    return [r for r in line.events("response.create")
            if DELIVERY_KEY in ((r.event.get("response") or {}).get("metadata") or {})]


async def delivery(session: SessionClient, status: str) -> dict[str, Any] | None:
    """The session's one final delivery once it reached `status`."""
    deliveries = [d for d in (await session.snapshot())["deliveries"]
                  if d.get("kind", "final") == "final"]
    assert len(deliveries) <= 1, deliveries
    return deliveries[0] if deliveries and deliveries[0]["status"] == status else None


async def committed(session: SessionClient) -> bool:
    """Every operation of the session committed."""
    operations = (await session.snapshot())["operations"]
    return bool(operations) and all(o["status"] == "committed" for o in operations)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """Where the agent writes its log."""
    return tmp_path


async def test_a_tool_call_is_an_operation_and_the_closing_waits_for_a_quiet_caller(
    stack: SurfaceStack, session: SessionClient, agent: Agent, realtime_port: int
) -> None:
    name = unique("notion")
    await fault(stack, match=name, latency_ms=1500, times=1)
    async with RealtimeModelServer(port=realtime_port) as server:
        phone, line = await call(agent, session, server, 0)
        try:
            await line.caller_starts()
            await line.caller_stops(f"give me access to {name}", call=asks_for(name))
            [output] = await line.wait(line.outputs)
            # The model heard holdline's acceptance: started, not done.
            [operation] = (await session.snapshot())["operations"]
            assert output.startswith("Accepted: provision_access"), output
            assert operation["operation_id"] in output
            assert operation["status"] != "committed"
            # The caller talks while the access lands...
            await line.caller_starts()
            await eventually(lambda: committed(session), timeout_s=30)
            # ...and goes on talking well past the moment the closing was ready.
            await asyncio.sleep(1.0)
            assert closings_asked(line) == [], "the closing was said over the caller"
            stopped_at = time.monotonic()
            await line.caller_stops("okay thanks")
            spoken = await eventually(lambda: delivery(session, "spoken"), timeout_s=30)
        finally:
            await phone.hang_up()
    [asked] = closings_asked(line)
    assert asked.at > stopped_at
    assert asked.event["response"]["metadata"][DELIVERY_KEY] == spoken["delivery_id"]
    assert line.invalid == []
    snapshot = await session.snapshot()
    said = [m for m in snapshot["messages"] if m.get("delivery_id") == spoken["delivery_id"]]
    assert len(said) == 1
    assert [text for _, text in line.said].count(said[0]["text"]) == 1
    assert await effects(stack, name) == 1


async def test_a_barge_in_during_the_closing_is_unheard_with_the_words_heard(
    stack: SurfaceStack, session: SessionClient, agent: Agent, realtime_port: int
) -> None:
    name = unique("gitlab")
    await fault(stack, match=name, latency_ms=800, times=1)
    async with RealtimeModelServer(port=realtime_port) as server:
        phone, line = await call(agent, session, server, 0)
        try:
            await line.caller_starts()
            await line.caller_stops(f"give me access to {name}", call=asks_for(name))
            await line.wait(lambda: closings_asked(line), timeout_s=30)
            sent = await eventually(lambda: delivery(session, "sent"), timeout_s=10)
            # Half a second of the closing has played at the phone: the caller cuts in.
            returned = len([u for u in phone.utterances if u.returned_at])
            target = returned + 5  # 100 ms marks: half a second in

            async def playing() -> bool:
                return len([u for u in phone.utterances if u.returned_at]) >= target

            await eventually(playing, timeout_s=20, every_s=0.02)
            await line.caller_starts()
            unheard = await eventually(lambda: unheard_event(session, sent["delivery_id"]),
                                       timeout_s=20)
            await line.caller_stops("sorry, go on")
            spoken = await eventually(lambda: delivery(session, "spoken"), timeout_s=30)
        finally:
            await phone.hang_up()
    assert phone.clears, "the barge-in sent no clear"
    assert unheard["data"]["reason"].startswith("cut")
    assert spoken["delivery_id"] == sent["delivery_id"]
    messages = (await session.snapshot())["messages"]
    # History keeps the words heard before the cut (a proper prefix of what was being
    # said), then the closing once, when it was heard whole.
    heard = [m["text"] for m in messages
             if m["role"] == "assistant" and not m.get("delivery_id")]
    full = [m["text"] for m in messages if m.get("delivery_id") == spoken["delivery_id"]]
    assert len(full) == 1
    instructions = closings_asked(line)[0].event["response"]["instructions"]
    first = instructions.split("nothing else:", 1)[1].strip()
    assert heard, messages
    cut = heard[-1]
    assert cut.split(), "no words were recorded as heard"
    assert first.startswith(cut), (cut, first)
    assert len(cut.split()) < len(first.split()), (cut, first)
    assert await effects(stack, name) == 1


async def unheard_event(session: SessionClient, delivery_id: str) -> dict[str, Any] | None:
    """The first `delivery.unheard` of the delivery."""
    for event in (await session.timeline())["events"]:
        if event["type"] == "delivery.unheard" and event.get("delivery_id") == delivery_id:
            found: dict[str, Any] = event
            return found
    return None


async def test_a_killed_agent_keeps_the_operation_and_the_next_call_hears_the_closing(
    stack: SurfaceStack, hl: HoldlineClient, logs: Path
) -> None:
    session = await hl.create_session(user_id=unique("crash"), tenant_id="acme")
    name = unique("figma")
    await fault(stack, match=name, latency_ms=1500, times=1)
    async with RealtimeModelServer() as server:
        # The replacement process is started ahead (its imports take seconds on a loaded
        # machine), so the next call comes while holdline still waits for a proactive
        # window, as a supervisor restarting the agent would have it back.
        with running_agent(stack, server.url, logs) as first, \
                running_agent(stack, server.url, logs) as restarted:
            phone, line = await call(first, session, server, 0)
            await line.caller_starts()
            await line.caller_stops(f"give me access to {name}", call=asks_for(name))
            await line.wait(line.outputs)
            assert not await committed(session)
            first.kill9()
            await phone.hang_up(stop=False)
            # The operation completes while no agent is up: holdline owns it.
            await eventually(lambda: committed(session), timeout_s=30)
            assert closings_asked(line) == []
            phone, second = await call(restarted, session, server, 1)
            try:
                spoken = await eventually(lambda: delivery(session, "spoken"), timeout_s=30)
            finally:
                await phone.hang_up()
    [asked] = closings_asked(second)
    assert asked.event["response"]["metadata"][DELIVERY_KEY] == spoken["delivery_id"]
    messages = (await session.snapshot())["messages"]
    assert len([m for m in messages if m.get("delivery_id") == spoken["delivery_id"]]) == 1
    assert await effects(stack, name) == 1


async def test_malformed_calls_from_the_model_get_an_apology_and_admit_nothing(
    stack: SurfaceStack, session: SessionClient, agent: Agent, realtime_port: int
) -> None:
    name = unique("jira")
    async with RealtimeModelServer(port=realtime_port) as server:
        phone, line = await call(agent, session, server, 0)
        try:
            # Arguments cut off mid-JSON, then a tool the agent does not have.
            await line.caller_stops(f"access to {name}",
                                    call=("provision_access", '{"accesses": ["' + name))
            await line.wait(lambda: len(line.said) >= 1)
            await line.caller_stops("launch the rockets", call=("launch_rockets", "{}"))
            apology = await line.wait(lambda: [
                r for r in line.events("response.create")
                if "launch_rockets" in ((r.event.get("response") or {}).get("instructions")
                                        or "")])
            await line.wait(lambda: len(line.said) >= 2)
        finally:
            await phone.hang_up()
    bad_json, unknown = line.outputs()
    assert "nothing was started" in bad_json
    assert "not valid JSON" in bad_json
    assert unknown == "Tool launch_rockets not found"  # the SDK's own answer
    assert "nothing was started" in apology[0].event["response"]["instructions"]
    assert [text for _, text in line.said] == [
        "Sorry, I could not do that.", "Sorry, I did not get that. Could you say it again?"]
    # Neither reached admission: no operation, no effect.
    assert (await session.snapshot())["operations"] == []
    assert await effects(stack, name) == 0
    assert line.invalid == []


async def test_the_minimal_example_without_a_phone_hears_its_closing(
    stack: SurfaceStack, hl: HoldlineClient
) -> None:
    name = unique("linear")
    async with RealtimeModelServer() as server:
        session_id, token = await run_local(
            stack.url, [f"give me access to {name}"], seconds=8.0, url=server.url
        )
        [line] = server.lines
    session = hl.session(session_id, token)
    spoken = await eventually(lambda: delivery(session, "spoken"), timeout_s=10)
    [asked] = closings_asked(line)
    assert asked.event["response"]["metadata"][DELIVERY_KEY] == spoken["delivery_id"]
    assert line.outputs()[0].startswith("Accepted: provision_access")
    assert line.invalid == []
    assert await effects(stack, name) == 1
