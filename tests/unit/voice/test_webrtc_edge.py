"""The WebRTC edge's pure parts: offers, data-channel frames, the track's queue, ICE servers,
the 48 kHz conversions, and the wire's marks."""

from __future__ import annotations

import math
import struct
from collections import deque

import pytest
from aiortc import RTCConfiguration, RTCPeerConnection

from services.interaction_surface.voice.codec import (
    RATE,
    WEBRTC_FRAME_BYTES,
    WebRtcDown,
    WebRtcUp,
    pcm16_to_ulaw,
    rms,
    ulaw_to_pcm16,
)
from services.interaction_surface.voice.stream_frames import FrameError
from services.interaction_surface.voice.trust import TelephonyMisconfigured
from services.interaction_surface.voice.webrtc_frames import (
    clear_frame,
    decode_page_frame,
    mark_frame,
    transcript_frame,
)
from services.interaction_surface.voice.webrtc_peer import (
    OfferRefused,
    check_offer,
    shorten_jitter_buffer,
)
from services.interaction_surface.voice.webrtc_settings import (
    IceServer,
    parse_ice_servers,
    webrtc_from_env,
)
from services.interaction_surface.voice.webrtc_track import _Mark, take_frame
from services.interaction_surface.voice.webrtc_wire import WebRtcWire

_OFFER = (
    "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"
    "m=audio 9 UDP/TLS/RTP/SAVPF {pts}\r\nc=IN IP4 0.0.0.0\r\n{maps}"
    "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n"
)


def _offer(*codecs: tuple[int, str]) -> str:
    maps = "".join(f"a=rtpmap:{pt} {name}\r\n" for pt, name in codecs)
    return _OFFER.format(pts=" ".join(str(pt) for pt, _ in codecs), maps=maps)


def test_an_offer_needs_sdp_an_audio_line_and_a_codec_we_take() -> None:
    check_offer(_offer((111, "opus/48000/2")))
    check_offer(_offer((8, "PCMA/8000"), (0, "PCMU/8000")))
    with pytest.raises(OfferRefused) as not_sdp:
        check_offer("hello, I am not a session description")
    assert not_sdp.value.status == 400
    with pytest.raises(OfferRefused) as no_audio:
        check_offer("v=0\r\ns=-\r\nm=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n")
    assert no_audio.value.status == 422
    assert "audio m-line" in no_audio.value.detail
    with pytest.raises(OfferRefused) as codecs:
        check_offer(_offer((8, "PCMA/8000"), (9, "G722/8000")))
    assert codecs.value.status == 422
    assert "codecs" in codecs.value.detail


def test_page_frames_decode_or_fail_with_a_stable_reason() -> None:
    assert decode_page_frame('{"type": "mark", "name": "r_1", "extra": 1}').name == "r_1"
    for raw, reason in (
        ("{nope", "malformed_json"),
        ("[1, 2]", "not_an_object"),
        ('{"type": "hello"}', "unknown_frame"),
        ('{"type": "mark"}', "bad_mark"),
        ('{"type": "mark", "name": ""}', "bad_mark"),
    ):
        with pytest.raises(FrameError) as refused:
            decode_page_frame(raw)
        assert refused.value.reason == reason, raw
    assert mark_frame("d_1") == '{"type":"mark","name":"d_1"}'
    assert clear_frame() == '{"type":"clear"}'
    assert transcript_frame("user", "hi") == '{"type":"transcript","role":"user","text":"hi"}'


def test_the_track_reaches_a_mark_with_the_frame_that_ends_its_audio() -> None:
    audio = b"\x01\x02" * (WEBRTC_FRAME_BYTES // 2 + WEBRTC_FRAME_BYTES // 4)
    items: deque[bytes | _Mark] = deque([audio, _Mark("a"), _Mark("b"), b"\x03\x04" * 10])
    first, marks = take_frame(items)
    assert first == audio[:WEBRTC_FRAME_BYTES]
    assert marks == []
    second, marks = take_frame(items)
    # The utterance ends here: padded with silence, both marks reached, the next audio waits.
    assert second[: WEBRTC_FRAME_BYTES // 2] == audio[WEBRTC_FRAME_BYTES:]
    assert second[WEBRTC_FRAME_BYTES // 2 :] == bytes(WEBRTC_FRAME_BYTES // 2)
    assert marks == ["a", "b"]
    third, marks = take_frame(items)
    assert third.startswith(b"\x03\x04" * 10)
    assert marks == []
    assert take_frame(items) == (bytes(WEBRTC_FRAME_BYTES), [])


def test_ice_servers_from_json_or_urls() -> None:
    assert parse_ice_servers("") == ()
    assert parse_ice_servers("stun:stun.example:3478, turn:u:p@turn.example:3478") == (
        IceServer(("stun:stun.example:3478",)),
        IceServer(("turn:turn.example:3478",), "u", "p"),
    )
    assert parse_ice_servers(
        '[{"urls": ["turn:t.example"], "username": "a", "credential": "b"}]'
    ) == (IceServer(("turn:t.example",), "a", "b"),)
    for bad in ("http://nope", "[{}]", "[1"):
        with pytest.raises(TelephonyMisconfigured):
            parse_ice_servers(bad)


def _tone(rate: int, ms: int, channels: int = 1) -> bytes:
    samples = rate * ms // 1000
    values = [int(8000 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(samples)]
    return b"".join(struct.pack("<" + "h" * channels, *([v] * channels)) for v in values)


def test_48k_audio_converts_to_the_calls_ulaw_and_back() -> None:
    down = WebRtcDown()
    stereo = down.convert(_tone(48000, 100, channels=2), 48000, 2)
    # The band-limiting filter holds back a few milliseconds until the next frame.
    assert abs(len(stereo) - RATE // 10) <= 32
    assert rms(ulaw_to_pcm16(stereo)) > 3000
    # PCMU is decoded at 8 kHz: the same call audio, no resampling needed.
    assert abs(len(WebRtcDown().convert(_tone(8000, 100), 8000, 1)) - RATE // 10) <= 32
    up = WebRtcUp().convert(pcm16_to_ulaw(_tone(8000, 100)))
    assert abs(len(up) - 48000 // 10 * 2) <= 32 * 6 * 2
    assert rms(up) > 3000


class _Channel:
    def __init__(self) -> None:
        self.readyState = "open"
        self.sent: list[str] = []

    def send(self, data: str) -> None:
        self.sent.append(data)


async def test_the_wire_sends_marks_once_reached_and_knows_which_came_back() -> None:
    wire = WebRtcWire()
    await wire.send_audio(b"\xff" * 160)
    await wire.send_mark("r_1")
    await wire.send_clear()
    # Nothing reached before the clear; the clear waits for the channel, then goes.
    channel = _Channel()
    wire.attach(channel)
    assert channel.sent == ['{"type":"clear"}']
    await wire.send_audio(b"\x00" * 160)
    await wire.send_mark("r_2")
    _, marks = take_frame(wire.track._items)
    for name in marks:
        wire._mark_reached(name)
    assert channel.sent[-1] == '{"type":"mark","name":"r_2"}'
    assert wire.returned("r_2")
    assert not wire.returned("r_2")
    assert not wire.returned("r_1")


def test_webrtc_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLDLINE_ICE_SERVERS", "stun:stun.example:3478")
    monkeypatch.setenv("HOLDLINE_WEBRTC_JITTER_PACKETS", "2")
    settings = webrtc_from_env()
    assert settings.ice_servers == (IceServer(("stun:stun.example:3478",)),)
    assert settings.jitter_packets == 2
    assert settings.media_timeout_s == 10.0
    monkeypatch.setenv("HOLDLINE_WEBRTC_JITTER_PACKETS", "0")
    with pytest.raises(TelephonyMisconfigured):
        webrtc_from_env()


async def test_the_receivers_jitter_buffer_is_shortened() -> None:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    try:
        receiver = pc.addTransceiver("audio").receiver
        assert shorten_jitter_buffer(receiver, 1)
        buffer = receiver._RTCRtpReceiver__jitter_buffer  # type: ignore[attr-defined]
        assert buffer._prefetch == 1
    finally:
        await pc.close()
