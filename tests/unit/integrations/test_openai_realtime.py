"""The OpenAI Realtime adapter's pieces without a network: the malformed-call check, the
heard words, the tracker's memory, and admissions that outlive a cancelled SDK tool task."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents.realtime.events import (
    RealtimeAudio,
    RealtimeAudioInterrupted,
    RealtimeEventInfo,
    RealtimeRawModelEvent,
)
from agents.realtime.model_events import RealtimeModelAudioEvent, RealtimeModelRawServerEvent
from agents.run_context import RunContextWrapper

from holdline.client import (
    DeliverySay,
    Fact,
    PendingDelivery,
    PendingUpdates,
    ToolCall,
    ToolCallResult,
    ToolCallsResponse,
)
from holdline.integrations._realtime_parts import (
    HeardTracker,
    Outgoing,
    audio_ms,
    instructions_for,
    malformed,
)
from holdline.integrations.openai_realtime import HoldlineRealtime


def _say(text: str = "Access to notion is ready.") -> DeliverySay:
    return DeliverySay(seq=1, delivery_id="d1", batch_id="b1", text=text, facts=[],
                       priority="normal", interrupt=False)


def test_a_malformed_call_is_named_and_a_good_one_passes() -> None:
    known = {"provision_access"}
    assert malformed("provision_access", '{"accesses": ["x"]}', known) is None
    assert malformed("provision_access", "", known) is None
    assert "no tool named" in (malformed("launch_rockets", "{}", known) or "")
    assert "not valid JSON" in (malformed("provision_access", '{"accesses": [', known) or "")
    assert "not a JSON object" in (malformed("provision_access", '["x"]', known) or "")


def test_heard_words_follow_the_share_of_audio_played() -> None:
    outgoing = Outgoing(_say(), transcript="access to notion is ready now", received_ms=3000)
    assert outgoing.heard_words(0) == ""
    assert outgoing.heard_words(1000) == "access to"
    assert outgoing.heard_words(5000) == "access to notion is ready now"
    # Without a transcript, the closing's own text is what was being said.
    assert Outgoing(_say("a b c d"), received_ms=400).heard_words(200) == "a b"


def test_the_tracker_remembers_what_played_across_an_interruption() -> None:
    tracker = HeardTracker()
    tracker.set_audio_format("g711_ulaw")
    seen: list[str] = []
    tracker.listeners.append(seen.append)
    tracker.on_play_bytes("item1", 0, b"\x00" * 800)
    tracker.on_play_ms("item1", 0, 50)
    tracker.on_interrupted()
    assert tracker.get_state()["current_item_id"] is None
    assert tracker.played_ms("item1") == pytest.approx(150)
    assert seen == ["item1", "item1"]
    assert audio_ms("g711_ulaw", 800) == 100
    assert audio_ms({"type": "audio/pcmu"}, 800) == 100
    assert audio_ms("pcm16", 4800) == 100
    assert instructions_for(_say("Done.")).endswith("nothing else:\nDone.")
    facts = [Fact(operation_id="op1", tool="provision_access", status="committed",
                  summary="notion granted")]
    say = DeliverySay(seq=1, delivery_id="d1", batch_id="b1", text="Done.", facts=facts,
                      priority="normal", interrupt=False)
    assert "- provision_access (committed): notion granted" in instructions_for(say, "model")
    assert "nothing else:" not in instructions_for(say, "model")


class _SlowSession:
    """A `SessionClient` stand-in whose admission takes a while."""

    def __init__(self) -> None:
        self.calls: list[ToolCall] = []
        self.admitted = asyncio.Event()

    async def tool_calls(self, calls: list[ToolCall], **_: Any) -> ToolCallsResponse:
        self.calls.extend(calls)
        await asyncio.sleep(0.2)
        self.admitted.set()
        return ToolCallsResponse(turn_id="t1", batch_id="b1", results=[
            ToolCallResult(tool_call_id=calls[0].tool_call_id, output="Accepted: started")])


def _bridge(session: _SlowSession) -> HoldlineRealtime:
    bridge = HoldlineRealtime(session)  # type: ignore[arg-type]
    bridge._known = {"provision_access"}
    return bridge


async def test_an_admission_outlives_the_sdk_cancelling_its_tool_task() -> None:
    session = _SlowSession()
    bridge = _bridge(session)
    sdk_task = asyncio.create_task(bridge.call("call_1", "provision_access", '{"accesses":["x"]}'))
    await asyncio.sleep(0.05)
    sdk_task.cancel()  # what the SDK does a second after its session closes
    with pytest.raises(asyncio.CancelledError):
        await sdk_task
    assert bridge.admissions_in_flight == 1
    await asyncio.wait_for(session.admitted.wait(), 2)
    await asyncio.sleep(0)
    assert bridge.admissions_in_flight == 0
    assert [c.tool_call_id for c in session.calls] == ["call_1"]


async def test_a_malformed_call_goes_to_the_apology_never_to_holdline() -> None:
    session = _SlowSession()
    bridge = _bridge(session)
    bad_json = await bridge.call("call_1", "provision_access", '{"accesses": [')
    unknown = await bridge.call("call_2", "wire_money", "{}")
    assert session.calls == []
    for output in (bad_json, unknown):
        assert "nothing was started" in output
        assert "Apologise" in output
    good = await bridge.call("call_3", "provision_access", '{"accesses":["x"]}')
    assert good == "Accepted: started"
    assert [c.arguments for c in session.calls] == ['{"accesses":["x"]}']


class _RecordingSession:
    """A `SessionClient` stand-in that records acks and signals."""

    def __init__(self) -> None:
        self.acks: list[tuple[str, str, str | None]] = []
        self.signals: list[dict[str, bool]] = []

    async def ack(self, delivery_id: str, status: str, heard_text: str | None = None,
                  turn_id: str | None = None) -> None:
        self.acks.append((delivery_id, status, heard_text))

    async def signal(self, **fact: bool) -> None:
        self.signals.append(fact)


def _raw(data: dict[str, Any]) -> Any:
    return RealtimeRawModelEvent(data=RealtimeModelRawServerEvent(data=data),
                                 info=RealtimeEventInfo(context=RunContextWrapper(None)))


def _audio(response_id: str, item_id: str, size: int) -> Any:
    audio = RealtimeModelAudioEvent(data=b"\x7f" * size, response_id=response_id,
                                    item_id=item_id, content_index=0)
    return RealtimeAudio(audio=audio, item_id=item_id, content_index=0,
                         info=RealtimeEventInfo(context=RunContextWrapper(None)))


def _interrupted(item_id: str) -> Any:
    return RealtimeAudioInterrupted(item_id=item_id, content_index=0,
                                    info=RealtimeEventInfo(context=RunContextWrapper(None)))


async def _saying(text: str) -> tuple[HoldlineRealtime, _RecordingSession, Outgoing]:
    session = _RecordingSession()
    bridge = HoldlineRealtime(session)  # type: ignore[arg-type]
    bridge.tracker.set_audio_format("g711_ulaw")
    bridge._acks.start()
    bridge._signals.start()
    outgoing = Outgoing(_say(text))
    bridge._current = outgoing
    await bridge.observe(_raw({"type": "response.created", "response": {
        "id": "r1", "metadata": {"holdline_delivery_id": "d1"}}}))
    for word in text.split():
        await bridge.observe(_raw({"type": "response.output_audio_transcript.delta",
                                   "response_id": "r1", "delta": word + " "}))
        await bridge.observe(_audio("r1", "i1", 2400))  # 300 ms a word
    await bridge.observe(_raw({"type": "response.done", "response": {"id": "r1"}}))
    return bridge, session, outgoing


async def test_a_closing_played_to_its_end_is_spoken() -> None:
    bridge, session, outgoing = await _saying("access to notion is ready")
    bridge.tracker.on_play_ms("i1", 0, 1200)
    assert not outgoing.finished  # 300 ms still to play
    bridge.tracker.on_play_ms("i1", 0, 300)
    await bridge._acks.drain(1.0)
    assert session.acks == [("d1", "started", None), ("d1", "spoken", None)]
    await bridge._acks.stop()
    await bridge._signals.drain(1.0)
    await bridge._signals.stop()
    assert session.signals[0] == {"agent_speaking": True}
    assert session.signals[-1] == {"agent_speaking": False}


async def test_a_closing_cut_by_a_barge_in_is_unheard_with_the_words_heard() -> None:
    bridge, session, outgoing = await _saying("access to notion is ready")
    await bridge.observe(_raw({"type": "input_audio_buffer.speech_started"}))
    bridge.tracker.on_play_ms("i1", 0, 650)
    bridge.tracker.on_interrupted()  # the SDK resets its tracker before the app sees the cut
    await bridge.observe(_interrupted("i1"))
    bridge.tracker.on_play_ms("i1", 0, 900)  # a mark echoed after the cut changes nothing
    await bridge._acks.drain(1.0)
    assert session.acks == [("d1", "started", None), ("d1", "unheard", "access to")]
    assert outgoing.finished
    await bridge._acks.stop()
    await bridge._signals.drain(1.0)
    await bridge._signals.stop()
    assert {"user_speaking": True} in session.signals


class _PendingSession:
    """A `SessionClient` stand-in with one update waiting for the next turn."""

    async def pending(self) -> PendingUpdates:
        return PendingUpdates(context="", deliveries=[
            PendingDelivery(delivery_id="d7", text="Access to figma is ready.")])


async def test_updates_waiting_for_the_next_turn_are_said_on_the_next_call_once() -> None:
    bridge = HoldlineRealtime(_PendingSession())  # type: ignore[arg-type]
    said: list[DeliverySay] = []

    async def say(item: DeliverySay) -> None:
        said.append(item)

    bridge._say = say  # type: ignore[method-assign]
    await bridge._say_pending()
    assert [(s.delivery_id, s.text, s.interrupt) for s in said] == [
        ("d7", "Access to figma is ready.", False)]


async def test_a_closing_already_spoken_here_is_not_said_again() -> None:
    bridge = HoldlineRealtime(_RecordingSession())  # type: ignore[arg-type]
    bridge._spoken.add("d1")
    # Pushed as well as read as pending: nothing is sent, nothing waits for the caller.
    await asyncio.wait_for(bridge._say(_say()), 0.5)
    assert bridge._current is None
