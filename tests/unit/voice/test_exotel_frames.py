"""Exotel Voicebot's wire format, without a socket: typed frames in, chunked PCM out, and
the applet URL's credentials and parameters."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from starlette.datastructures import Headers

from services.interaction_surface.voice.carrier_settings import ExotelSettings
from services.interaction_surface.voice.codec import LinearLine, silence_ulaw
from services.interaction_surface.voice.exotel import basic_auth_ok, voicebot_url
from services.interaction_surface.voice.exotel_frames import ExotelStream, ExotelWire
from services.interaction_surface.voice.stream_frames import (
    FrameError,
    StreamDtmf,
    StreamMark,
    StreamMedia,
    StreamNothing,
    StreamStart,
    StreamStop,
)

pytestmark = pytest.mark.fast

START: dict[str, Any] = {
    "event": "start", "sequence_number": "1", "stream_sid": "MZ1",
    "start": {
        "stream_sid": "MZ1", "call_sid": "CA1", "account_sid": "AC1",
        "from": "+919876543210", "to": "+918047491899",
        "custom_parameters": {"user_id": "tel-91", "tenant_id": "acme", "ticket": "v1.x"},
        "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000", "bit_rate": "16"},
    },
}


def test_frames_as_exotel_sends_them() -> None:
    stream = ExotelStream()
    assert stream.decode('{"event": "connected"}') == StreamNothing()
    assert stream.decode(json.dumps(START)) == StreamStart(
        call_id="CA1", stream_id="MZ1",
        params={"user_id": "tel-91", "tenant_id": "acme", "ticket": "v1.x"},
    )
    pcm = b"\x00\x00" * 800  # 100 ms of 8 kHz PCM
    media = {"event": "media", "sequence_number": "3", "stream_sid": "MZ1",
             "media": {"chunk": "2", "timestamp": "200",
                       "payload": base64.b64encode(pcm).decode()}}
    frame = stream.decode(json.dumps(media))
    assert isinstance(frame, StreamMedia)
    assert len(frame.ulaw) == 800
    assert stream.decode(json.dumps(
        {"event": "dtmf", "stream_sid": "MZ1", "dtmf": {"digit": "5", "duration": "100"}}
    )) == StreamDtmf("5")
    assert stream.decode(json.dumps(
        {"event": "mark", "sequence_number": "15", "stream_sid": "MZ1", "mark": {"name": "r1"}}
    )) == StreamMark("r1")
    assert stream.decode('{"event": "stop", "stream_sid": "MZ1", "stop": {}}') == StreamStop()


def test_parameters_fall_back_to_the_stream_urls_query() -> None:
    start = json.loads(json.dumps(START))
    del start["start"]["custom_parameters"]
    stream = ExotelStream({"session_id": "s1", "token": "t"})
    frame = stream.decode(json.dumps(start))
    assert isinstance(frame, StreamStart)
    assert frame.params == {"session_id": "s1", "token": "t"}


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("{garbage", "malformed_json"),
        ('"text"', "not_an_object"),
        ('{"media": {}}', "missing_event"),
        ('{"event": "holiday"}', "unknown_event"),
        ('{"event": "media", "media": {"payload": "%%%"}}', "invalid_base64"),
        ('{"event": "media", "media": {}}', "missing_payload"),
        ('{"event": "mark", "mark": {"name": ""}}', "missing_mark_name"),
        ('{"event": "dtmf", "dtmf": {"digit": "A"}}', "bad_dtmf"),
        ('{"event": "start", "start": {"custom_parameters": {"a": [1]}}}', "bad_parameters"),
        ('{"event": "start", "start": {"media_format": {"sample_rate": "44100"}}}',
         "bad_start"),
    ],
)
def test_bad_frames_have_stable_reasons(message: str, reason: str) -> None:
    with pytest.raises(FrameError) as refused:
        ExotelStream().decode(message)
    assert refused.value.reason == reason


def test_media_before_start_and_binary_frames_are_refused() -> None:
    stream = ExotelStream()
    with pytest.raises(FrameError) as early:
        stream.decode('{"event": "media", "media": {"payload": "AAAA"}}')
    assert early.value.reason == "media_before_start"
    with pytest.raises(FrameError) as binary:
        stream.decode(b"\x00\x01")
    assert binary.value.reason == "binary_frame"


class _Socket:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    async def send_text(self, data: str) -> None:
        self.sent.append(json.loads(data))


async def test_wire_sends_100ms_chunks_then_a_padded_rest_and_the_mark() -> None:
    socket = _Socket()
    wire = ExotelWire(socket, "MZ1", LinearLine(8000))  # type: ignore[arg-type]
    await wire.send_audio(silence_ulaw(250))
    sizes = [len(base64.b64decode(f["media"]["payload"])) for f in socket.sent]
    assert sizes == [1600, 1600]  # 2 x 100 ms of 16-bit PCM; 50 ms waits
    await wire.send_mark("closing-1")
    rest = base64.b64decode(socket.sent[2]["media"]["payload"])
    assert len(rest) == 960  # 800 bytes of audio, padded to a multiple of 320
    assert socket.sent[3] == {"event": "mark", "stream_sid": "MZ1", "mark": {"name": "closing-1"}}
    await wire.send_audio(silence_ulaw(30))
    await wire.send_clear()
    assert socket.sent[-1] == {"event": "clear", "stream_sid": "MZ1"}
    assert len(socket.sent) == 5  # the gathered 30 ms was dropped, never sent


def test_basic_credentials_and_the_stream_url() -> None:
    settings = ExotelSettings(user="exo", password="p@ss:word")
    good = base64.b64encode(b"exo:p@ss:word").decode()
    assert basic_auth_ok(settings, Headers({"authorization": f"Basic {good}"}))
    for header in ("", "Basic !!!", f"Bearer {good}",
                   "Basic " + base64.b64encode(b"exo:wrong").decode()):
        assert not basic_auth_ok(settings, Headers({"authorization": header}))
    url = voicebot_url("https://calls.example.com/v1/telephony/exotel/voicebot?CallSid=1",
                       {"user_id": "tel-91", "tenant_id": "acme"}, settings)
    assert url == ("wss://exo:p%40ss%3Aword@calls.example.com/v1/telephony/exotel"
                   "?user_id=tel-91&tenant_id=acme")
