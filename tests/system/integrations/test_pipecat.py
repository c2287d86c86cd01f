"""Pipecat on holdline: the example bot (`examples/pipecat_twilio.py`) as its own process — a
real pipeline of `FastAPIWebsocketTransport`, the Twilio serializer, Silero VAD, the context
aggregators, `HoldlineProcessor` and an espeak-ng TTS, with only the STT and LLM scripted —
called by the project's Twilio-protocol phone, against holdline's real services."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from holdline.client import HoldlineClient, SessionClient
from testkit.phone import Phone, Utterance, speech
from testkit.processes import ROOT, free_port
from testkit.surface import SurfaceStack, effects, eventually, fault, unique

pytestmark = pytest.mark.timeout(120)

BOT = ROOT / "examples" / "pipecat_twilio.py"


@dataclass
class Bot:
    """The Pipecat bot process."""

    holdline_url: str
    script: str
    log_path: Path
    speak: str = "text"
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Where the phone dials."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> None:
        """Start and wait until it answers."""
        self.port = free_port()
        argv = [sys.executable, str(BOT), "--port", str(self.port),
                "--holdline", self.holdline_url, "--script", self.script, "--speak", self.speak]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the bot exited: {self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.1)
        raise TimeoutError("the bot never answered")

    def kill9(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)


@contextlib.contextmanager
def running_bot(
    stack: SurfaceStack, script: str, logs: Path, speak: str = "text"
) -> Iterator[Bot]:
    """A started bot, killed on exit."""
    bot = Bot(stack.url, script, logs / f"bot-{uuid_tail()}.log", speak)
    try:
        bot.start()
        yield bot
    finally:
        bot.kill9()


def uuid_tail() -> str:
    """A short unique tag."""
    return unique("b").rsplit("-", 1)[1]


async def final(session: SessionClient) -> dict[str, Any] | None:
    """The session's one final delivery, once there is one."""
    finals = [d for d in (await session.snapshot())["deliveries"]
              if d.get("kind", "final") == "final"]
    assert len(finals) <= 1, finals
    return finals[0] if finals else None


async def spoken_closing(session: SessionClient, timeout_s: float = 40) -> dict[str, Any]:
    """The final delivery once `spoken`; on a timeout, what the session went through."""
    try:
        return await eventually(lambda: with_status(session, "spoken"), timeout_s=timeout_s)
    except AssertionError:
        events = (await session.timeline())["events"]
        trail = [(e["type"], e.get("data", {}).get("reason")) for e in events
                 if e["type"].startswith(("delivery.", "speech.", "playback.", "channel."))]
        raise AssertionError(f"no closing spoken; {await final(session)}; {trail}") from None


async def with_status(session: SessionClient, status: str) -> dict[str, Any] | None:
    """The final delivery once it reached `status`."""
    found = await final(session)
    return found if found and found["status"] == status else None


def heard(phone: Phone, delivery_id: str) -> list[Utterance]:
    """The delivery's utterances that played through (mark back, not flushed by a clear)."""
    return [u for u in phone.utterances
            if u.mark == delivery_id and u.returned_at and not u.flushed]


async def ledger_per_resource(stack: SurfaceStack, names: tuple[str, ...]) -> list[int]:
    """Effects at the provider for each resource."""
    return [await effects(stack, name) for name in names]


@pytest.fixture
def names() -> tuple[str, str]:
    """Two resource names no other test uses."""
    return unique("notion"), unique("gitlab")


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """Where the bot writes its log."""
    return tmp_path


async def all_committed(session: SessionClient) -> bool:
    """Every operation of the session committed."""
    operations = (await session.snapshot())["operations"]
    return bool(operations) and all(o["status"] == "committed" for o in operations)


async def played_out(phone: Phone, quiet_s: float = 0.6) -> None:
    """Until the agent's audio stopped arriving (the bot paces it at playback speed)."""
    last, since = phone.media_ms(), time.monotonic()
    deadline = since + 30
    while time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, "the agent never stopped talking"
        await asyncio.sleep(0.05)
        if phone.media_ms() != last:
            last, since = phone.media_ms(), time.monotonic()


async def dial(bot: Bot, session: SessionClient) -> Phone:
    """A call from the project's phone, continuing the session."""
    phone = Phone(bot.url, {"session_id": session.session_id, "token": session.token})
    await phone.dial()
    return phone


async def test_the_caller_hears_the_acceptance_talks_while_results_land_then_one_closing(
    stack: SurfaceStack, session: SessionClient, names: tuple[str, str], logs: Path
) -> None:
    for name in names:
        # Long enough for the results to land after the acceptance, while the caller talks.
        await fault(stack, match=name, latency_ms=6500, times=1)
    with running_bot(stack, f"give me access to {names[0]} and {names[1]}", logs) as bot:
        request = await speech(f"give me access to {names[0]} and {names[1]}")
        # The caller keeps talking while the results land, phrase after phrase with no
        # pause a VAD would end a turn on: one stretch of speech.
        talk = b"".join([
            await speech("wait one moment please", tail_silence_ms=0),
            await speech("i am looking for a pen", tail_silence_ms=0),
            await speech("okay i have it now", tail_silence_ms=1200),
        ])
        phone = await dial(bot, session)
        try:
            await phone.talk(request)
            await phone.wait_audio(timeout_s=20)
            # The acceptance is playing while the accesses are still running...
            operations = (await session.snapshot())["operations"]
            assert sorted(o["status"] for o in operations) != ["committed", "committed"]
            # ...and the caller hears it to its end.
            await played_out(phone)
            assert not await all_committed(session)
            await phone.talk(talk)
            assert await all_committed(session), "the results did not land while the caller talked"
            talking_ended = time.monotonic() - 1.2
            spoken = await spoken_closing(session)
        finally:
            await phone.hang_up()
    delivery_id = spoken["delivery_id"]
    played = heard(phone, delivery_id)
    # Exactly one closing, said once and heard whole: nothing cut, nothing repeated.
    assert [u for u in phone.utterances if u.mark == delivery_id] == played
    assert len(played) == 1, phone.utterances
    # holdline may have taken a send back before any audio (the caller spoke first), but
    # never cut a closing the caller was hearing.
    assert await played_ms_of_unheard(session, delivery_id) in ([], [0])
    # Nothing of the closing reached the line while the caller was still talking.
    assert played[0].began_at is not None
    assert played[0].began_at > talking_ended
    assert await ledger_per_resource(stack, names) == [1, 1]
    snapshot = await session.snapshot()
    assert sorted(o["status"] for o in snapshot["operations"]) == ["committed", "committed"]
    said = [m for m in snapshot["messages"] if m.get("delivery_id") == delivery_id]
    assert len(said) == 1


async def test_a_barge_in_during_the_closing_is_unheard_then_heard_later(
    stack: SurfaceStack, session: SessionClient, names: tuple[str, str], logs: Path
) -> None:
    for name in names:
        await fault(stack, match=name, latency_ms=800, times=1)
    with running_bot(stack, f"give me access to {names[0]} and {names[1]}", logs) as bot:
        phone = await dial(bot, session)
        try:
            await phone.talk(await speech(f"give me access to {names[0]} and {names[1]}"))
            sent = await eventually(lambda: with_status(session, "sent"), timeout_s=30)
            # The closing's audio is on the line: the caller cuts in.
            before = phone.media_ms()

            async def closing_audio() -> bool:
                return phone.media_ms() > before

            await eventually(closing_audio, timeout_s=20, every_s=0.02)
            await phone.talk(await speech("stop stop stop"))
            await eventually(lambda: unheard(session, sent["delivery_id"]), timeout_s=20)
            spoken = await spoken_closing(session)
        finally:
            await phone.hang_up()
    assert spoken["delivery_id"] == sent["delivery_id"]
    assert phone.clears, "the barge-in sent no clear"
    assert len(heard(phone, spoken["delivery_id"])) == 1
    # The cut closing never entered the history; the one heard later did, once.
    messages = (await session.snapshot())["messages"]
    assert len([m for m in messages if m.get("delivery_id") == spoken["delivery_id"]]) == 1
    assert await ledger_per_resource(stack, names) == [1, 1]


async def played_ms_of_unheard(session: SessionClient, delivery_id: str) -> list[int]:
    """How much of the delivery had played each time holdline recorded it unheard."""
    events = (await session.timeline())["events"]
    return sorted({int(e["data"].get("played_ms", 0)) for e in events
                   if e["type"] == "delivery.unheard" and e.get("delivery_id") == delivery_id})


async def unheard(session: SessionClient, delivery_id: str) -> bool:
    """The delivery was recorded unheard at least once."""
    timeline = await session.timeline()
    return any(e["type"] == "delivery.unheard" and e.get("delivery_id") == delivery_id
               for e in timeline["events"])


async def test_the_bot_dies_mid_batch_and_a_new_call_hears_the_closing_once(
    stack: SurfaceStack, hl: HoldlineClient, names: tuple[str, str], logs: Path
) -> None:
    session = await hl.create_session(user_id=unique("crash"), tenant_id="acme")
    for name in names:
        await fault(stack, match=name, latency_ms=2500, times=1)
    script = f"give me access to {names[0]} and {names[1]}"
    with running_bot(stack, script, logs) as bot:
        phone = await dial(bot, session)
        await phone.talk(await speech(script))
        await phone.wait_audio(timeout_s=20)
        assert [o["status"] for o in (await session.snapshot())["operations"]] != ["committed"] * 2
        bot.kill9()
        await phone.hang_up(stop=False)
    # The batch completes while no bot is up.
    await eventually(lambda: all_committed(session), timeout_s=30)
    with running_bot(stack, "mm-hm", logs) as bot:
        phone = await dial(bot, session)
        try:
            spoken = await spoken_closing(session)
        finally:
            await phone.hang_up()
    assert len(heard(phone, spoken["delivery_id"])) == 1
    snapshot = await session.snapshot()
    assert len([m for m in snapshot["messages"]
                if m.get("delivery_id") == spoken["delivery_id"]]) == 1
    assert await ledger_per_resource(stack, names) == [1, 1]


async def test_with_speak_model_the_bots_own_model_phrases_the_closing(
    stack: SurfaceStack, session: SessionClient, names: tuple[str, str], logs: Path
) -> None:
    for name in names:
        await fault(stack, match=name, latency_ms=800, times=1)
    script = f"give me access to {names[0]} and {names[1]}"
    with running_bot(stack, script, logs, speak="model") as bot:
        phone = await dial(bot, session)
        try:
            await phone.talk(await speech(script))
            spoken = await spoken_closing(session)
        finally:
            await phone.hang_up()
        log = bot.log_path.read_text(errors="replace")
    # The bot's LLM spoke its own wording of holdline's facts (the TTS logs what it said),
    # and its audio's mark came back: the closing was heard.
    assert "Generating TTS [Update: " in log
    assert "All done" not in log
    assert len(heard(phone, spoken["delivery_id"])) == 1
    assert await ledger_per_resource(stack, names) == [1, 1]
