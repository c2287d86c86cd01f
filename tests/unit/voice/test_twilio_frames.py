"""Twilio Media Streams' wire format, without a socket: typed frames in, encoded frames out."""

from __future__ import annotations

import base64
import json
from typing import Any

import msgspec
import pytest

from services.interaction_surface.voice.twilio_frames import (
    FrameError,
    TwilioAudio,
    TwilioConnected,
    TwilioDigit,
    TwilioDtmf,
    TwilioInbound,
    TwilioMark,
    TwilioMarkName,
    TwilioMedia,
    TwilioStart,
    TwilioStartInfo,
    TwilioStop,
    clear_frame,
    decode_frame,
    mark_frame,
    media_frame,
)

pytestmark = pytest.mark.fast

ULAW = bytes(range(256)) * 2

# One frame of each inbound type, as Twilio sends it (with fields the edge never reads).
TWILIO: list[tuple[dict[str, Any], TwilioInbound]] = [
    (
        {"event": "connected", "protocol": "Call", "version": "1.0.0"},
        TwilioConnected(),
    ),
    (
        {
            "event": "start", "sequenceNumber": "1", "streamSid": "MZ1",
            "start": {
                "streamSid": "MZ1", "accountSid": "AC1", "callSid": "CA1",
                "tracks": ["inbound"],
                "customParameters": {"session_id": "s1", "token": "t", "n": 7},
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            },
        },
        TwilioStart(
            start=TwilioStartInfo(
                call_sid="CA1", stream_sid="MZ1",
                custom_parameters={"session_id": "s1", "token": "t", "n": 7},
            ),
            stream_sid="MZ1",
        ),
    ),
    (
        {
            "event": "media", "sequenceNumber": "3", "streamSid": "MZ1",
            "media": {
                "track": "inbound", "chunk": "1", "timestamp": "5",
                "payload": base64.b64encode(ULAW).decode(),
            },
        },
        TwilioMedia(media=TwilioAudio(payload=ULAW)),
    ),
    (
        {"event": "mark", "sequenceNumber": "4", "streamSid": "MZ1", "mark": {"name": "p1"}},
        TwilioMark(mark=TwilioMarkName(name="p1")),
    ),
    (
        {
            "event": "dtmf", "streamSid": "MZ1", "sequenceNumber": "5",
            "dtmf": {"track": "inbound_track", "digit": "#"},
        },
        TwilioDtmf(dtmf=TwilioDigit(digit="#")),
    ),
    (
        {"event": "stop", "sequenceNumber": "6", "streamSid": "MZ1",
         "stop": {"accountSid": "AC1", "callSid": "CA1"}},
        TwilioStop(),
    ),
]


@pytest.mark.parametrize(("wire", "typed"), TWILIO, ids=[w["event"] for w, _ in TWILIO])
def test_each_inbound_frame_decodes_typed_and_round_trips(
    wire: dict[str, Any], typed: TwilioInbound
) -> None:
    decoded = decode_frame(json.dumps(wire))
    assert decoded == typed
    # What the edge reads survives an encode and a decode unchanged.
    assert decode_frame(msgspec.json.encode(decoded)) == typed


@pytest.mark.parametrize("sequence", [None, "9", 9, 1.5, [], {"a": 1}])
def test_unknown_fields_and_any_sequence_number_are_ignored(sequence: Any) -> None:
    frame: dict[str, Any] = {"event": "dtmf", "dtmf": {"digit": "5", "extra": {"a": [1]}},
                             "somethingNew": {"nested": True}}
    if sequence is not None:
        frame["sequenceNumber"] = sequence
    assert decode_frame(json.dumps(frame)) == TwilioDtmf(dtmf=TwilioDigit(digit="5"))


def test_a_start_without_parameters_or_ids_still_decodes() -> None:
    assert decode_frame('{"event": "start", "start": {}}') == TwilioStart(start=TwilioStartInfo())


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "malformed_json"),
        ("[1, 2]", "not_an_object"),
        ("null", "not_an_object"),
        ('{"streamSid": "x"}', "missing_event"),
        ('{"event": "holiday", "x": 1}', "unknown_event"),
        ('{"event": 12}', "unknown_event"),
        ('{"event": "clear"}', "unknown_event"),
        ('{"event": "media"}', "missing_payload"),
        ('{"event": "media", "media": "x"}', "missing_payload"),
        ('{"event": "media", "media": {}}', "missing_payload"),
        ('{"event": "media", "media": {"payload": 5}}', "missing_payload"),
        ('{"event": "media", "media": {"payload": "!!not base64!!"}}', "invalid_base64"),
        ('{"event": "media", "media": {"payload": "/w"}}', "invalid_base64"),
        ('{"event": "mark", "mark": {}}', "missing_mark_name"),
        ('{"event": "mark", "mark": {"name": ""}}', "missing_mark_name"),
        ('{"event": "mark", "mark": {"name": 7}}', "missing_mark_name"),
        ('{"event": "dtmf", "dtmf": {"digit": "x"}}', "bad_dtmf"),
        ('{"event": "dtmf", "dtmf": {"digit": "55"}}', "bad_dtmf"),
        ('{"event": "dtmf"}', "bad_dtmf"),
        ('{"event": "start"}', "bad_start"),
        ('{"event": "start", "start": 5}', "bad_start"),
        ('{"event": "start", "start": {"callSid": 5}}', "bad_start"),
        ('{"event": "start", "streamSid": [], "start": {}}', "bad_start"),
        ('{"event": "start", "start": {"customParameters": [1]}}', "bad_parameters"),
        ('{"event": "start", "start": {"customParameters": {"a": {"b": 1}}}}', "bad_parameters"),
        ('{"event": "start", "start": {"customParameters": {"a": true}}}', "bad_parameters"),
    ],
)
def test_a_frame_twilio_could_not_send_is_refused_with_a_reason(raw: str, reason: str) -> None:
    with pytest.raises(FrameError) as caught:
        decode_frame(raw)
    assert caught.value.reason == reason
    # msgspec's own words say what was wrong, for the log.
    assert caught.value.detail


def test_outbound_frames_are_twilios() -> None:
    assert json.loads(media_frame("MZ1", ULAW)) == {
        "event": "media", "streamSid": "MZ1",
        "media": {"payload": base64.b64encode(ULAW).decode()},
    }
    assert json.loads(mark_frame("MZ1", "p1")) == {
        "event": "mark", "streamSid": "MZ1", "mark": {"name": "p1"},
    }
    assert json.loads(clear_frame("MZ1")) == {"event": "clear", "streamSid": "MZ1"}


def test_outbound_media_and_marks_read_back_as_inbound() -> None:
    # A phone that echoes what it is sent (as Twilio does with marks) is understood.
    assert decode_frame(media_frame("MZ1", ULAW)) == TwilioMedia(media=TwilioAudio(ULAW))
    assert decode_frame(mark_frame("MZ1", "p1")) == TwilioMark(mark=TwilioMarkName("p1"))
