"""Plivo audio streams' wire format, without a socket: frames in, what they mean out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from services.interaction_surface.voice.plivo_frames import (
    MAX_EXTRA_HEADERS,
    PlivoStream,
    checkpoint_frame,
    clear_frame,
    pack_parameters,
    play_frame,
    unpack_extra_headers,
)
from services.interaction_surface.voice.stream_frames import (
    FrameError,
    StreamDtmf,
    StreamFrame,
    StreamMark,
    StreamMedia,
    StreamNothing,
    StreamStart,
)

ULAW = bytes(range(256)) * 2
CARRIER = PlivoStream()
PARAMS = {"user_id": "caller-1", "tenant_id": "acme", "ticket": "v1.1.abc.def-_"}


def start(extra: str | None, **info: Any) -> dict[str, Any]:
    frame: dict[str, Any] = {
        "event": "start", "sequenceNumber": 1,
        "start": {
            "callId": "c-uuid", "streamId": "s-uuid", "accountId": "MA1",
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
            **info,
        },
    }
    if extra is not None:
        frame["extra_headers"] = extra
    return frame


FRAMES: list[tuple[dict[str, Any], StreamFrame]] = [
    (start(pack_parameters(PARAMS)),
     StreamStart(call_id="c-uuid", stream_id="s-uuid", params=PARAMS)),
    # Other entries beside ours, `;` between them, or a JSON object of them.
    (start("a=1;" + pack_parameters(PARAMS) + ";b=2"),
     StreamStart(call_id="c-uuid", stream_id="s-uuid", params=PARAMS)),
    (start(json.dumps({"X-PH-holdline": pack_parameters(PARAMS).split("=", 1)[1]})),
     StreamStart(call_id="c-uuid", stream_id="s-uuid", params=PARAMS)),
    (start(None), StreamStart(call_id="c-uuid", stream_id="s-uuid", params={})),
    (
        {"event": "media", "sequenceNumber": 42, "streamId": "s-uuid",
         "media": {"track": "inbound", "timestamp": "1705312200000", "chunk": 41,
                   "payload": base64.b64encode(ULAW).decode()},
         "extra_headers": "x=1"},
        StreamMedia(ULAW),
    ),
    ({"event": "dtmf", "sequenceNumber": 7, "streamId": "s-uuid",
      "dtmf": {"track": "inbound", "digit": "5", "timestamp": "1"}}, StreamDtmf("5")),
    ({"event": "playedStream", "sequenceNumber": 8, "streamId": "s-uuid", "name": "d_1"},
     StreamMark("d_1")),
    ({"event": "clearedAudio", "sequenceNumber": 9, "streamId": "s-uuid"}, StreamNothing()),
]


@pytest.mark.parametrize(("frame", "meaning"), FRAMES)
def test_each_inbound_frame_means_what_plivo_says(
    frame: dict[str, Any], meaning: StreamFrame
) -> None:
    assert CARRIER.decode(json.dumps(frame)) == meaning


BAD: list[tuple[str | bytes, str]] = [
    ("{garbage", "malformed_json"),
    ('"text"', "not_an_object"),
    ('{"streamId": "s"}', "missing_event"),
    ('{"event": "stopStream"}', "unknown_event"),
    ('{"event": "media", "media": {"payload": "%%%"}}', "invalid_base64"),
    ('{"event": "media"}', "missing_payload"),
    ('{"event": "playedStream", "name": ""}', "missing_mark_name"),
    ('{"event": "dtmf", "dtmf": {"digit": "A"}}', "bad_dtmf"),
    ('{"event": "start", "start": []}', "bad_start"),
    ('{"event": "start", "start": {}, "extra_headers": 5}', "bad_parameters"),
    (json.dumps(start("holdline=not-base32!")), "bad_parameters"),
    (json.dumps(start("holdline=MFRGG")), "bad_parameters"),
    (json.dumps(start(None, mediaFormat={"encoding": "audio/x-l16", "sampleRate": 16000})),
     "unsupported_encoding"),
    (b"\x00binary", "binary_frame"),
]


@pytest.mark.parametrize(("raw", "reason"), BAD)
def test_a_frame_plivo_could_not_send_has_a_stable_reason(raw: str | bytes, reason: str) -> None:
    with pytest.raises(FrameError) as refused:
        CARRIER.decode(raw)
    assert refused.value.reason == reason


def test_parameters_fit_plivo_extra_headers() -> None:
    # The largest parameters a webhook issues: ids of 64 characters and a ticket.
    biggest = {"user_id": "u" * 64, "tenant_id": "t" * 64,
               "ticket": "v1.1999999999." + "a" * 24 + "." + "b" * 43}
    packed = pack_parameters(biggest)
    assert len(packed) <= MAX_EXTRA_HEADERS
    name, _, value = packed.partition("=")
    assert name.isalnum()
    assert value.isalnum()
    assert unpack_extra_headers(packed) == biggest


def test_outbound_frames_are_what_plivo_reads() -> None:
    assert json.loads(play_frame("s-uuid", ULAW)) == {
        "event": "playAudio", "streamId": "s-uuid",
        "media": {"contentType": "audio/x-mulaw", "sampleRate": 8000,
                  "payload": base64.b64encode(ULAW).decode()},
    }
    assert json.loads(checkpoint_frame("s-uuid", "d_1")) == {
        "event": "checkpoint", "streamId": "s-uuid", "name": "d_1"}
    assert json.loads(clear_frame("s-uuid")) == {"event": "clearAudio", "streamId": "s-uuid"}
