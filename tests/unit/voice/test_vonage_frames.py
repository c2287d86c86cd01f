"""Vonage's WebSocket format, without a socket: events and L16 audio in, L16 audio out,
and the wire's own playout clock standing in for the marks Vonage does not have."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from services.interaction_surface.voice.codec import LinearLine, silence_ulaw
from services.interaction_surface.voice.stream_frames import (
    FrameError,
    StreamDtmf,
    StreamMedia,
    StreamNothing,
    StreamStart,
)
from services.interaction_surface.voice.vonage_frames import (
    HEARD_MARGIN_S,
    VonageStream,
    VonageWire,
    audio_rate,
)

pytestmark = pytest.mark.fast

CONNECTED = {
    "event": "websocket:connected", "content-type": "audio/l16;rate=16000",
    "call_uuid": "aaaa-bbbb", "user_id": "tel-4477", "tenant_id": "acme", "ticket": "v1.x",
}


def test_connected_is_the_start_with_the_ncco_headers() -> None:
    stream = VonageStream()
    frame = stream.decode(json.dumps(CONNECTED))
    assert frame == StreamStart(
        call_id="aaaa-bbbb", stream_id=None,
        params={"call_uuid": "aaaa-bbbb", "user_id": "tel-4477", "tenant_id": "acme",
                "ticket": "v1.x"},
    )
    assert stream.line is not None
    assert stream.line.rate == 16000
    # A repeated connected opens nothing new.
    assert stream.decode(json.dumps(CONNECTED)) == StreamNothing()


def test_binary_l16_becomes_the_calls_ulaw() -> None:
    stream = VonageStream()
    with pytest.raises(FrameError) as early:
        stream.decode(b"\x00" * 640)
    assert early.value.reason == "media_before_start"
    stream.decode(json.dumps(CONNECTED))
    frame = stream.decode(b"\x00\x00" * 320)  # 20 ms of 16 kHz silence
    assert isinstance(frame, StreamMedia)
    assert len(frame.ulaw) == 160  # 20 ms of 8 kHz μ-law


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("{garbage", "malformed_json"),
        ("[1, 2]", "not_an_object"),
        ('{"digit": "5"}', "missing_event"),
        ('{"event": "websocket:holiday"}', "unknown_event"),
        ('{"event": "websocket:dtmf", "digit": "x"}', "bad_dtmf"),
        ('{"event": "websocket:connected"}', "bad_start"),
        ('{"event": "websocket:connected", "content-type": "audio/pcmu"}', "bad_start"),
        ('{"event": "websocket:connected", "content-type": "audio/l16;rate=16000",'
         ' "user_id": {"nested": 1}}', "bad_parameters"),
    ],
)
def test_bad_messages_have_stable_reasons(message: str, reason: str) -> None:
    with pytest.raises(FrameError) as refused:
        VonageStream().decode(message)
    assert refused.value.reason == reason


def test_dtmf_and_unknown_fields() -> None:
    stream = VonageStream()
    event: dict[str, Any] = {"event": "websocket:dtmf", "digit": "#", "duration": 260}
    assert stream.decode(json.dumps(event)) == StreamDtmf("#")
    assert audio_rate("audio/l16;rate=8000") == 8000


class _Socket:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def send_bytes(self, data: bytes) -> None:
        self.sent.append(data)


async def test_wire_sends_20ms_l16_and_reports_a_mark_once_played() -> None:
    socket = _Socket()
    now = [100.0]
    wire = VonageWire(socket, LinearLine(16000), clock=lambda: now[0])  # type: ignore[arg-type]
    heard: list[str] = []
    wire.played_to(heard.append)
    await wire.send_audio(silence_ulaw(50))  # 50 ms: two whole frames, 10 ms waiting
    assert [len(f) for f in socket.sent] == [640, 640]
    await wire.send_mark("reply-1")
    assert [len(f) for f in socket.sent] == [640, 640, 640]  # the rest, padded
    assert heard == []
    await asyncio.sleep(0.06 + HEARD_MARGIN_S + 0.05)
    assert heard == ["reply-1"]


async def test_a_clear_drops_pending_marks() -> None:
    socket = _Socket()
    wire = VonageWire(socket, LinearLine(8000))  # type: ignore[arg-type]
    heard: list[str] = []
    wire.played_to(heard.append)
    await wire.send_audio(silence_ulaw(200))
    assert {len(f) for f in socket.sent} == {320}
    await wire.send_mark("closing-1")
    await wire.send_clear()
    await asyncio.sleep(0.2 + HEARD_MARGIN_S + 0.1)
    assert heard == []
