"""Telnyx media streaming's wire format, without a socket: frames in, what they mean out."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from services.interaction_surface.voice.stream_frames import (
    FrameError,
    StreamDtmf,
    StreamFrame,
    StreamMark,
    StreamMedia,
    StreamNothing,
    StreamStart,
    StreamStop,
)
from services.interaction_surface.voice.telnyx_frames import (
    TelnyxStream,
    clear_frame,
    mark_frame,
    media_frame,
)

ULAW = bytes(range(256)) * 2
CARRIER = TelnyxStream()


def start(**info: Any) -> dict[str, Any]:
    return {
        "event": "start", "sequence_number": "1", "stream_id": "st-1",
        "start": {
            "user_id": "u-1", "call_control_id": "v3:abc", "call_session_id": "cs",
            "from": "+15550100", "to": "+15550199",
            "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
            **info,
        },
    }


# One frame of each inbound type, as Telnyx sends it (with fields the edge never reads).
FRAMES: list[tuple[dict[str, Any], StreamFrame]] = [
    ({"event": "connected", "version": "1.0.0"}, StreamNothing()),
    (
        start(custom_parameters={"session_id": "s1", "token": "t", "n": 7}),
        StreamStart(call_id="v3:abc", stream_id="st-1",
                    params={"session_id": "s1", "token": "t", "n": "7"}),
    ),
    (
        start(custom_parameters=[{"name": "user_id", "value": "u"},
                                 {"name": "tenant_id", "value": "acme"}]),
        StreamStart(call_id="v3:abc", stream_id="st-1",
                    params={"user_id": "u", "tenant_id": "acme"}),
    ),
    (
        start(client_state=base64.b64encode(b'{"user_id": "u", "tenant_id": "acme"}').decode()),
        StreamStart(call_id="v3:abc", stream_id="st-1",
                    params={"user_id": "u", "tenant_id": "acme"}),
    ),
    (start(), StreamStart(call_id="v3:abc", stream_id="st-1", params={})),
    (
        {"event": "media", "sequence_number": "4", "stream_id": "st-1",
         "media": {"track": "inbound", "chunk": "2", "timestamp": "5",
                   "payload": base64.b64encode(ULAW).decode()}},
        StreamMedia(ULAW),
    ),
    (
        {"event": "media", "stream_id": "st-1",
         "media": {"track": "outbound", "payload": base64.b64encode(ULAW).decode()}},
        StreamNothing(),
    ),
    ({"event": "mark", "sequence_number": "5", "stream_id": "st-1", "mark": {"name": "p1"}},
     StreamMark("p1")),
    ({"event": "dtmf", "stream_id": "st-1", "occurred_at": "2026-12-08T00:00:00Z",
      "dtmf": {"digit": "#"}}, StreamDtmf("#")),
    ({"event": "stop", "sequence_number": "9", "stream_id": "st-1",
      "stop": {"user_id": "u-1", "call_control_id": "v3:abc"}}, StreamStop()),
]


@pytest.mark.parametrize(("frame", "meaning"), FRAMES)
def test_each_inbound_frame_means_what_telnyx_says(
    frame: dict[str, Any], meaning: StreamFrame
) -> None:
    assert CARRIER.decode(json.dumps(frame)) == meaning


BAD: list[tuple[str | bytes, str]] = [
    ("{garbage", "malformed_json"),
    ("[1, 2]", "not_an_object"),
    ('{"media": {}}', "missing_event"),
    ('{"event": "holiday"}', "unknown_event"),
    ('{"event": "media", "media": {"payload": "%%%"}}', "invalid_base64"),
    ('{"event": "media", "media": {}}', "missing_payload"),
    ('{"event": "mark", "mark": {"name": ""}}', "missing_mark_name"),
    ('{"event": "dtmf", "dtmf": {"digit": "x"}}', "bad_dtmf"),
    ('{"event": "start", "start": 3}', "bad_start"),
    (json.dumps(start(custom_parameters={"a": {"nested": 1}})), "bad_parameters"),
    (json.dumps(start(custom_parameters={"a": "x" * 4000})), "bad_parameters"),
    (json.dumps(start(custom_parameters=[{"name": "a", "value": "1"},
                                         {"name": "a", "value": "2"}])), "bad_parameters"),
    (json.dumps(start(client_state="not base64!")), "bad_parameters"),
    (json.dumps(start(client_state=base64.b64encode(b"[1]").decode())), "bad_parameters"),
    (json.dumps(start(media_format={"encoding": "OPUS", "sample_rate": 16000})),
     "unsupported_encoding"),
    ('{"event": "error", "payload": {"code": 100002, "title": "Unknown error"}}',
     "carrier_error"),
    (b"\x00\x01binary", "binary_frame"),
]


@pytest.mark.parametrize(("raw", "reason"), BAD)
def test_a_frame_telnyx_could_not_send_has_a_stable_reason(raw: str | bytes, reason: str) -> None:
    with pytest.raises(FrameError) as refused:
        CARRIER.decode(raw)
    assert refused.value.reason == reason


def test_outbound_frames_are_what_telnyx_reads() -> None:
    assert json.loads(media_frame(ULAW)) == {
        "event": "media", "media": {"payload": base64.b64encode(ULAW).decode()}
    }
    assert json.loads(mark_frame("d_1")) == {"event": "mark", "mark": {"name": "d_1"}}
    assert json.loads(clear_frame()) == {"event": "clear"}
