"""Twilio Media Streams' wire format: the frames a phone stream sends, and the ones sent back.

Inbound frames (`connected`, `start`, `media`, `mark`, `dtmf`, `stop`) decode into frozen
Structs, one union tagged on `event` (`decode_frame`). Only the fields the edge reads are
declared: every other field (`sequenceNumber`, `accountSid`, `tracks`, whatever Twilio adds)
is ignored, whatever its type, so `sequenceNumber` is optional as DESIGN §6 says. A frame
that does not decode raises `FrameError` with a stable reason (the label of
`holdline_telephony_frames_rejected_total`) and msgspec's own detail.

Outbound frames (`media`, `mark`, `clear`) are encoded from Structs (`media_frame`,
`mark_frame`, `clear_frame`) and sent by `TwilioWire`, the call's `CallWire` on this
carrier. A `media` payload is base64 μ-law on the wire both ways (msgspec's own encoding of
`bytes`); converting the audio is `codec`'s.
"""

from __future__ import annotations

import contextlib
from typing import Annotated, Literal

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

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
from .stream_frames import refusal_reason as stream_refusal_reason
from .trust import text_params

# ---------------------------------------------------------------------------- inbound


class TwilioConnected(msgspec.Struct, frozen=True, tag_field="event", tag="connected"):
    """The stream is open; nothing in it is read."""


class TwilioStartInfo(msgspec.Struct, frozen=True, rename="camel"):
    """The `start` object: the call, the stream, and the TwiML's `<Parameter>`s."""

    call_sid: str = ""
    stream_sid: str | None = None
    # Strings on the wire; numbers are taken too (`trust.text_params` applies the limits).
    custom_parameters: dict[str, str | int | float] | None = None


class TwilioStart(msgspec.Struct, frozen=True, tag_field="event", tag="start", rename="camel"):
    """The call starts streaming."""

    start: TwilioStartInfo
    # Older streams carry the stream id beside `start` only.
    stream_sid: str | None = None


class TwilioAudio(msgspec.Struct, frozen=True):
    """A `media` object: μ-law 8 kHz, base64 on the wire."""

    payload: bytes


class TwilioMedia(msgspec.Struct, frozen=True, tag_field="event", tag="media"):
    """Caller audio."""

    media: TwilioAudio


class TwilioMarkName(msgspec.Struct, frozen=True):
    """A `mark` object: the name the mark was sent with."""

    name: Annotated[str, msgspec.Meta(min_length=1)]


class TwilioMark(msgspec.Struct, frozen=True, tag_field="event", tag="mark"):
    """The audio sent before a mark has played."""

    mark: TwilioMarkName


# The keys of a telephone keypad.
Key = Literal["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#"]


class TwilioDigit(msgspec.Struct, frozen=True):
    """A `dtmf` object: one key."""

    digit: Key


class TwilioDtmf(msgspec.Struct, frozen=True, tag_field="event", tag="dtmf"):
    """A key press."""

    dtmf: TwilioDigit


class TwilioStop(msgspec.Struct, frozen=True, tag_field="event", tag="stop"):
    """The phone hung up; nothing in it is read."""


TwilioInbound = TwilioConnected | TwilioStart | TwilioMedia | TwilioMark | TwilioDtmf | TwilioStop

_INBOUND = msgspec.json.Decoder(TwilioInbound)

# The reason a refused frame is counted under, by the part of the frame that failed.
_PART_REASONS = {
    "event": "unknown_event",
    "start": "bad_start",
    "streamSid": "bad_start",
    "media": "missing_payload",
    "mark": "missing_mark_name",
    "dtmf": "bad_dtmf",
}


def refusal_reason(detail: str) -> str:
    """The stable reason for msgspec's validation message about a frame."""
    return stream_refusal_reason(detail, _PART_REASONS, "start.customParameters")


def decode_frame(raw: str | bytes) -> TwilioInbound:
    """One inbound text frame, typed; FrameError when it is not one Twilio could send."""
    try:
        return _INBOUND.decode(raw)
    except msgspec.ValidationError as exc:
        raise FrameError(refusal_reason(str(exc)), str(exc)) from None
    except msgspec.DecodeError as exc:
        raise FrameError("malformed_json", str(exc)) from None


# ---------------------------------------------------------------------------- outbound


class TwilioMediaOut(msgspec.Struct, frozen=True, tag_field="event", tag="media", rename="camel"):
    """Agent audio for the phone to play."""

    stream_sid: str
    media: TwilioAudio


class TwilioMarkOut(msgspec.Struct, frozen=True, tag_field="event", tag="mark", rename="camel"):
    """Sent after an utterance's audio: it comes back once that audio has played."""

    stream_sid: str
    mark: TwilioMarkName


class TwilioClear(msgspec.Struct, frozen=True, tag_field="event", tag="clear", rename="camel"):
    """Drop the audio the phone has queued; its pending marks come back at once."""

    stream_sid: str


_OUTBOUND = msgspec.json.Encoder()


def media_frame(stream_sid: str, ulaw: bytes) -> str:
    """A `media` frame carrying μ-law audio."""
    return _OUTBOUND.encode(TwilioMediaOut(stream_sid, TwilioAudio(ulaw))).decode()


def mark_frame(stream_sid: str, name: str) -> str:
    """A `mark` frame."""
    return _OUTBOUND.encode(TwilioMarkOut(stream_sid, TwilioMarkName(name))).decode()


def clear_frame(stream_sid: str) -> str:
    """A `clear` frame."""
    return _OUTBOUND.encode(TwilioClear(stream_sid)).decode()


class TwilioWire:
    """A call's outbound side on a Twilio media stream (a `CallWire`)."""

    def __init__(self, websocket: WebSocket, stream_sid: str) -> None:
        self.websocket = websocket
        self.stream_sid = stream_sid

    async def _send(self, frame: str) -> None:
        # The phone hung up mid-send: what was left is simply not heard.
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.websocket.send_text(frame)

    async def send_audio(self, ulaw: bytes) -> None:
        """One `media` frame."""
        await self._send(media_frame(self.stream_sid, ulaw))

    async def send_mark(self, name: str) -> None:
        """One `mark` frame; Twilio returns it once the audio before it played."""
        await self._send(mark_frame(self.stream_sid, name))

    async def send_clear(self) -> None:
        """One `clear` frame: Twilio drops its queued audio and returns its pending marks."""
        await self._send(clear_frame(self.stream_sid))


class TwilioStream:
    """Twilio Media Streams as a `media_stream.Carrier`."""

    def decode(self, message: str | bytes) -> StreamFrame:
        """A text frame as what it means to the call (Twilio sends no binary frames)."""
        if isinstance(message, bytes):
            raise FrameError("binary_frame")
        match decode_frame(message):
            case TwilioStart(start=start, stream_sid=outer_sid):
                params = text_params(start.custom_parameters)
                if params is None:
                    raise FrameError("bad_parameters")
                return StreamStart(
                    call_id=start.call_sid, stream_id=start.stream_sid or outer_sid,
                    params=params,
                )
            case TwilioMedia(media=media):
                return StreamMedia(media.payload)
            case TwilioMark(mark=mark):
                return StreamMark(mark.name)
            case TwilioDtmf(dtmf=dtmf):
                return StreamDtmf(dtmf.digit)
            case TwilioStop():
                return StreamStop()
            case TwilioConnected():
                return StreamNothing()

    def wire(self, websocket: WebSocket, stream_id: str) -> TwilioWire:
        """The call's outbound side on this stream."""
        return TwilioWire(websocket, stream_id)
