"""Vonage Voice API WebSockets' wire format: the messages a call's socket carries, both ways.

Inbound, text messages are JSON events tagged on `event` (`decode_event`):
`websocket:connected` comes first, with the NCCO endpoint's `content-type` and its
`headers` spread beside them at the top level (those are the call's parameters: the call
id, who the caller is, the ticket); `websocket:dtmf` is a key press. Other events Vonage
may add are refused as `unknown_event` (counted, ignored). Binary messages are the caller's
audio: 16-bit little-endian linear PCM (L16) at the rate the connected message names,
20 ms a message, converted to the call's μ-law 8 kHz by `codec.LinearLine`.

Outbound, the agent's audio goes out as binary L16 messages of exactly 20 ms (`VonageWire`).
Vonage has no mark and no clear: it plays what it receives, from a small buffer. So the
wire keeps the playout clock itself (a `wire.SelfTimedWire`): audio sent plays in real
time, back to back, from when it was sent; a mark counts as played (heard) once that
audio's duration has elapsed, plus a margin for Vonage's buffer and the network. A clear
drops what the wire has not sent and its pending marks; what Vonage already holds (the
call's playout lead, `HOLDLINE_PLAYOUT_LEAD_MS`, 160 ms by default) still plays.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

from .codec import FrameSplitter, LinearLine, pcm16_ms
from .stream_frames import (
    FrameError,
    StreamDtmf,
    StreamFrame,
    StreamMedia,
    StreamNothing,
    StreamStart,
)
from .trust import text_params

# The header the answer webhook puts the call's uuid in (the ticket is bound to it).
CALL_HEADER = "call_uuid"
# A mark is reported this long after its audio's estimated end: Vonage's own buffer and the
# network delay the real playout a little; a later report only makes "heard" safer.
HEARD_MARGIN_S = 0.2
_RATE = re.compile(r"^audio/l16;\s*rate=(\d+)$", re.IGNORECASE)
_RATES = (8000, 16000, 24000)
# The keys of a telephone keypad.
Key = Literal["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#"]


class VonageConnected(
    msgspec.Struct, frozen=True, tag_field="event", tag="websocket:connected"
):
    """The socket is open: the audio format, then the NCCO's headers (read separately)."""

    content_type: str = msgspec.field(name="content-type")


class VonageDtmf(msgspec.Struct, frozen=True, tag_field="event", tag="websocket:dtmf"):
    """A key press."""

    digit: Key


VonageEvent = VonageConnected | VonageDtmf

_EVENTS = msgspec.json.Decoder(VonageEvent)
_OBJECT = msgspec.json.Decoder(dict[str, Any])
# The reason a refused event is counted under, by the part of the message that failed.
_PART_REASONS = {"event": "unknown_event", "content-type": "bad_start", "digit": "bad_dtmf"}
_AT = re.compile(r" - at `\$\.?([\w-]*)")


def decode_event(raw: str | bytes) -> VonageEvent:
    """One inbound text message, typed; FrameError when it is not one Vonage sends."""
    try:
        return _EVENTS.decode(raw)
    except msgspec.ValidationError as exc:
        detail = str(exc)
        if detail.startswith("Object missing required field `event`"):
            raise FrameError("missing_event", detail) from None
        if detail.startswith("Object missing required field `content-type`"):
            raise FrameError("bad_start", detail) from None
        at = _AT.search(detail)
        reason = _PART_REASONS.get(at.group(1), "bad_frame") if at else "not_an_object"
        raise FrameError(reason, detail) from None
    except msgspec.DecodeError as exc:
        raise FrameError("malformed_json", str(exc)) from None


def audio_rate(content_type: str) -> int:
    """The L16 rate a content type names; FrameError for any other format."""
    match = _RATE.match(content_type.strip())
    if match is None or int(match.group(1)) not in _RATES:
        raise FrameError("bad_start", f"unsupported content-type {content_type!r}")
    return int(match.group(1))


def connected_params(raw: str | bytes) -> dict[str, str]:
    """The NCCO headers of a connected message: every key but `event` and `content-type`."""
    headers = {
        key: value for key, value in _OBJECT.decode(raw).items()
        if key not in ("event", "content-type")
    }
    params = text_params(headers)
    if params is None:
        raise FrameError("bad_parameters")
    return params


class VonageWire:
    """A call's outbound side on a Vonage socket (a `CallWire` that times its own marks)."""

    def __init__(
        self,
        websocket: WebSocket,
        line: LinearLine,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.websocket = websocket
        self.line = line
        self._clock = clock
        self._frames = FrameSplitter(line.pcm_bytes(20))
        # When the audio sent so far ends playing, on `clock`.
        self._play_until = 0.0
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._on_mark: Callable[[str], None] | None = None

    def played_to(self, on_mark: Callable[[str], None]) -> None:
        """Where marks are reported once played (the call's `on_mark`)."""
        self._on_mark = on_mark

    async def _send(self, frame: bytes) -> None:
        # The caller hung up mid-send: what was left is simply not heard.
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.websocket.send_bytes(frame)

    def _played_for(self, pcm: bytes) -> None:
        now = self._clock()
        self._play_until = max(self._play_until, now) + pcm16_ms(pcm, self.line.rate) / 1000

    async def send_audio(self, ulaw: bytes) -> None:
        """The audio as L16 messages of exactly 20 ms (a remainder waits for more)."""
        for frame in self._frames.push(self.line.from_ulaw(ulaw)):
            self._played_for(frame)
            await self._send(frame)

    async def send_mark(self, name: str) -> None:
        """Send the remainder (padded with silence), then report the mark once it played."""
        rest = self._frames.flush()
        if rest:
            self._played_for(rest)
            await self._send(rest)
        delay = max(0.0, self._play_until - self._clock()) + HEARD_MARGIN_S
        loop = asyncio.get_running_loop()
        self._timers[name] = loop.call_later(delay, self._played, name)

    def _played(self, name: str) -> None:
        self._timers.pop(name, None)
        if self._on_mark is not None:
            self._on_mark(name)

    async def send_clear(self) -> None:
        """Drop the unsent remainder and every pending mark (the call settles them as cut)."""
        self._frames.flush()
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._play_until = self._clock()


class VonageStream:
    """One Vonage socket as a `media_stream.Carrier` (one per connection: it holds the
    call's audio conversion, set by the connected message)."""

    def __init__(self) -> None:
        self.line: LinearLine | None = None

    def decode(self, message: str | bytes) -> StreamFrame:
        """A message as what it means to the call: binary is audio, text an event."""
        if isinstance(message, bytes):
            if self.line is None:
                raise FrameError("media_before_start")
            return StreamMedia(self.line.to_ulaw(message))
        match decode_event(message):
            case VonageConnected(content_type=content_type):
                if self.line is not None:
                    return StreamNothing()
                rate = audio_rate(content_type)
                params = connected_params(message)
                self.line = LinearLine(rate)
                return StreamStart(
                    call_id=params.get(CALL_HEADER, ""), stream_id=None, params=params
                )
            case VonageDtmf(digit=digit):
                return StreamDtmf(digit)

    def wire(self, websocket: WebSocket, stream_id: str) -> VonageWire:
        """The call's outbound side on this socket."""
        assert self.line is not None, "the wire is built after the connected message"
        return VonageWire(websocket, self.line)
