"""Exotel Voicebot streams' wire format: the JSON frames of a bidirectional stream.

Inbound (`decode_frame`): `connected`, `start` (the call and stream sids, the applet URL's
`custom_parameters`, the `media_format`), `media` (base64 16-bit little-endian PCM, 8 kHz
unless the URL asked `sample-rate` 16000 or 24000), `dtmf`, `mark` (audio sent before it has
played), `stop`. Keys are snake_case; only the fields the edge reads are declared, so
`sequence_number`, `chunk`, `timestamp` and whatever Exotel adds are ignored. A frame that
does not decode raises `FrameError` with the same stable reasons as Twilio's.

Outbound (`ExotelWire`): `media` frames of base64 PCM at the stream's rate, `mark` and
`clear`. Exotel wants media chunks of at least 100 ms, at most 100 KB, and in multiples of
320 bytes: the wire gathers the agent's audio into 100 ms chunks and, before a mark, sends
the remainder padded with silence to a multiple of 320 bytes. A `clear` drops what the wire
gathered and what Exotel queued; Exotel returns marks like Twilio, and the call settles every
utterance pending at a clear as unheard whatever comes back.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Literal

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

from .codec import LinearLine
from .frame_decoding import decode_typed
from .stream_frames import (
    FrameError,
    StreamDtmf,
    StreamFrame,
    StreamMark,
    StreamMedia,
    StreamNothing,
    StreamStart,
    StreamStop,
)
from .trust import text_params

# Media chunks Exotel plays without gaps: 100 ms of 8 kHz PCM, a multiple of 320 bytes.
CHUNK_MS = 100
CHUNK_MULTIPLE = 320
_RATES = (8000, 16000, 24000)

# ---------------------------------------------------------------------------- inbound


class ExotelConnected(msgspec.Struct, frozen=True, tag_field="event", tag="connected"):
    """The stream is open; nothing in it is read."""


class ExotelMediaFormat(msgspec.Struct, frozen=True):
    """The stream's audio: 16-bit PCM at `sample_rate` (a string on the wire)."""

    sample_rate: str | int = "8000"


class ExotelStartInfo(msgspec.Struct, frozen=True):
    """The `start` object: the call, the stream, and the applet URL's parameters."""

    call_sid: str = ""
    stream_sid: str | None = None
    custom_parameters: dict[str, str | int | float] | None = None
    media_format: ExotelMediaFormat | None = None


class ExotelStart(msgspec.Struct, frozen=True, tag_field="event", tag="start"):
    """The call starts streaming."""

    start: ExotelStartInfo
    stream_sid: str | None = None


class ExotelAudio(msgspec.Struct, frozen=True):
    """A `media` object: base64 PCM on the wire."""

    payload: bytes


class ExotelMedia(msgspec.Struct, frozen=True, tag_field="event", tag="media"):
    """Caller audio."""

    media: ExotelAudio


class ExotelMarkName(msgspec.Struct, frozen=True):
    """A `mark` object: the name the mark was sent with."""

    name: Annotated[str, msgspec.Meta(min_length=1)]


class ExotelMark(msgspec.Struct, frozen=True, tag_field="event", tag="mark"):
    """The audio sent before a mark has played."""

    mark: ExotelMarkName


Key = Literal["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#"]


class ExotelDigit(msgspec.Struct, frozen=True):
    """A `dtmf` object: one key (its `duration` is not read)."""

    digit: Key


class ExotelDtmf(msgspec.Struct, frozen=True, tag_field="event", tag="dtmf"):
    """A key press."""

    dtmf: ExotelDigit


class ExotelStop(msgspec.Struct, frozen=True, tag_field="event", tag="stop"):
    """The call left the applet (or hung up); nothing in it is read."""


ExotelInbound = ExotelConnected | ExotelStart | ExotelMedia | ExotelMark | ExotelDtmf | ExotelStop

_INBOUND = msgspec.json.Decoder(ExotelInbound)
_PART_REASONS = {
    "event": "unknown_event",
    "start": "bad_start",
    "stream_sid": "bad_start",
    "media": "missing_payload",
    "mark": "missing_mark_name",
    "dtmf": "bad_dtmf",
}


def decode_frame(raw: str | bytes) -> ExotelInbound:
    """One inbound frame, typed; FrameError when it is not one Exotel could send."""
    return decode_typed(_INBOUND, raw, _PART_REASONS, "start.custom_parameters")


def stream_rate(media_format: ExotelMediaFormat | None) -> int:
    """The stream's PCM rate; FrameError for one Exotel does not stream."""
    raw = "8000" if media_format is None else str(media_format.sample_rate)
    if not raw.isdigit() or int(raw) not in _RATES:
        raise FrameError("bad_start", f"unsupported sample rate {raw!r}")
    return int(raw)


# ---------------------------------------------------------------------------- outbound


class ExotelMediaOut(msgspec.Struct, frozen=True, tag_field="event", tag="media"):
    """Agent audio for the caller."""

    stream_sid: str
    media: ExotelAudio


class ExotelMarkOut(msgspec.Struct, frozen=True, tag_field="event", tag="mark"):
    """Sent after an utterance's audio: it comes back once that audio has played."""

    stream_sid: str
    mark: ExotelMarkName


class ExotelClear(msgspec.Struct, frozen=True, tag_field="event", tag="clear"):
    """Drop the audio Exotel has queued."""

    stream_sid: str


_OUTBOUND = msgspec.json.Encoder()


class ExotelWire:
    """A call's outbound side on an Exotel Voicebot stream (a `CallWire`)."""

    def __init__(self, websocket: WebSocket, stream_sid: str, line: LinearLine) -> None:
        self.websocket = websocket
        self.stream_sid = stream_sid
        self.line = line
        self._chunk_bytes = line.pcm_bytes(CHUNK_MS)
        self._pending = bytearray()

    async def _send(self, frame: msgspec.Struct) -> None:
        # The caller hung up mid-send: what was left is simply not heard.
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.websocket.send_text(_OUTBOUND.encode(frame).decode())

    async def _media(self, pcm: bytes) -> None:
        await self._send(ExotelMediaOut(self.stream_sid, ExotelAudio(pcm)))

    async def send_audio(self, ulaw: bytes) -> None:
        """`media` frames of 100 ms (a remainder waits for more audio or the mark)."""
        self._pending.extend(self.line.from_ulaw(ulaw))
        while len(self._pending) >= self._chunk_bytes:
            chunk = bytes(self._pending[: self._chunk_bytes])
            del self._pending[: self._chunk_bytes]
            await self._media(chunk)

    async def send_mark(self, name: str) -> None:
        """The remainder, padded with silence to a multiple of 320 bytes, then the mark."""
        if self._pending:
            padding = -len(self._pending) % CHUNK_MULTIPLE
            rest = bytes(self._pending) + b"\x00" * padding
            self._pending.clear()
            await self._media(rest)
        await self._send(ExotelMarkOut(self.stream_sid, ExotelMarkName(name)))

    async def send_clear(self) -> None:
        """Drop the gathered audio, then one `clear` frame."""
        self._pending.clear()
        await self._send(ExotelClear(self.stream_sid))


class ExotelStream:
    """One Exotel stream as a `media_stream.Carrier` (one per connection: it holds the
    call's audio conversion, set by the start). `fallback` is the stream URL's query, the
    parameters when a start carries no `custom_parameters`."""

    def __init__(self, fallback: dict[str, str] | None = None) -> None:
        self.line: LinearLine | None = None
        self.fallback = fallback or {}

    def decode(self, message: str | bytes) -> StreamFrame:
        """A text frame as what it means to the call (Exotel sends no binary frames)."""
        if isinstance(message, bytes):
            raise FrameError("binary_frame")
        match decode_frame(message):
            case ExotelStart(start=start, stream_sid=outer_sid):
                if self.line is not None:
                    return StreamNothing()
                custom = start.custom_parameters or self.fallback
                params = text_params(custom)
                if params is None:
                    raise FrameError("bad_parameters")
                self.line = LinearLine(stream_rate(start.media_format))
                return StreamStart(
                    call_id=start.call_sid, stream_id=start.stream_sid or outer_sid,
                    params=params,
                )
            case ExotelMedia(media=media):
                if self.line is None:
                    raise FrameError("media_before_start")
                return StreamMedia(self.line.to_ulaw(media.payload))
            case ExotelMark(mark=mark):
                return StreamMark(mark.name)
            case ExotelDtmf(dtmf=dtmf):
                return StreamDtmf(dtmf.digit)
            case ExotelStop():
                return StreamStop()
            case ExotelConnected():
                return StreamNothing()

    def wire(self, websocket: WebSocket, stream_id: str) -> ExotelWire:
        """The call's outbound side on this stream."""
        assert self.line is not None, "the wire is built after the start"
        return ExotelWire(websocket, stream_id, self.line)
