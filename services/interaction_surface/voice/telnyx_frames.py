"""Telnyx media streaming's wire format: the frames a Telnyx stream sends, and the ones sent back.

Inbound frames (`connected`, `start`, `media`, `mark`, `dtmf`, `stop`, `error`) decode into
frozen Structs, one union tagged on `event` (`decode_frame`); only the fields the edge reads
are declared, every other one (`sequence_number`, `user_id`, whatever Telnyx adds) is
ignored. The `start` names the call (`call_control_id`) and carries the stream's parameters:
the TeXML `<Parameter>`s as `custom_parameters` (an object, or a list of `{name, value}`), or
else the `client_state` a Call Control `streaming_start` was given (base64 of a JSON object).
Media is base64 PCMU (μ-law 8 kHz), the codec the webhook's TeXML asks for; a frame of the
outbound track (a `both_tracks` stream) is nothing to the call.

Outbound (`media`, `mark`, `clear`) are sent by `TelnyxWire`. Telnyx returns a mark once the
media before it has played, and returns every queued mark at once on a `clear`, as Twilio
does: the call's playback ledger counts a mark as heard only when no clear was sent while it
was pending.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from typing import Annotated

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

from .frame_decoding import decode_typed
from .stream_frames import (
    FrameError,
    Key,
    StreamDtmf,
    StreamFrame,
    StreamMark,
    StreamMedia,
    StreamNothing,
    StreamStart,
    StreamStop,
)
from .trust import text_params

# ---------------------------------------------------------------------------- inbound


class TelnyxConnected(msgspec.Struct, frozen=True, tag_field="event", tag="connected"):
    """The stream is open; nothing in it is read."""


class TelnyxParameter(msgspec.Struct, frozen=True):
    """One custom parameter in the list form (`{name, value}`)."""

    name: str
    value: str | int | float


class TelnyxMediaFormat(msgspec.Struct, frozen=True):
    """The stream's audio: holdline's TeXML asks for PCMU at 8 kHz."""

    encoding: str = "PCMU"
    sample_rate: int = 8000


class TelnyxStartInfo(msgspec.Struct, frozen=True):
    """The `start` object: the call, its parameters, the media format."""

    call_control_id: str = ""
    # The TeXML `<Parameter>`s: an object of scalars, or a list of `{name, value}`.
    custom_parameters: dict[str, str | int | float] | list[TelnyxParameter] | None = None
    # Base64 of a JSON object of the parameters (a Call Control `streaming_start`).
    client_state: str | None = None
    media_format: TelnyxMediaFormat | None = None


class TelnyxStart(msgspec.Struct, frozen=True, tag_field="event", tag="start"):
    """The call starts streaming."""

    start: TelnyxStartInfo
    stream_id: str | None = None


class TelnyxAudio(msgspec.Struct, frozen=True):
    """A `media` object: base64 PCMU on the wire."""

    payload: bytes
    track: str | None = None


class TelnyxMedia(msgspec.Struct, frozen=True, tag_field="event", tag="media"):
    """Call audio (the caller's, on the inbound track)."""

    media: TelnyxAudio


class TelnyxMarkName(msgspec.Struct, frozen=True):
    """A `mark` object: the name the mark was sent with."""

    name: Annotated[str, msgspec.Meta(min_length=1)]


class TelnyxMark(msgspec.Struct, frozen=True, tag_field="event", tag="mark"):
    """The media sent before a mark has played (or a clear dropped it)."""

    mark: TelnyxMarkName


class TelnyxDigit(msgspec.Struct, frozen=True):
    """A `dtmf` object: one key."""

    digit: Key


class TelnyxDtmf(msgspec.Struct, frozen=True, tag_field="event", tag="dtmf"):
    """A key press."""

    dtmf: TelnyxDigit


class TelnyxStop(msgspec.Struct, frozen=True, tag_field="event", tag="stop"):
    """The stream ends (the call hung up or streaming was stopped)."""


class TelnyxError(msgspec.Struct, frozen=True, tag_field="event", tag="error"):
    """Telnyx reports a streaming error (e.g. a media frame it could not play); logged only."""

    payload: dict[str, object] | None = None


TelnyxInbound = (
    TelnyxConnected | TelnyxStart | TelnyxMedia | TelnyxMark | TelnyxDtmf | TelnyxStop
    | TelnyxError
)

_INBOUND = msgspec.json.Decoder(TelnyxInbound)

# The reason a refused frame is counted under, by the part of the frame that failed.
_PART_REASONS = {
    "event": "unknown_event",
    "start": "bad_start",
    "stream_id": "bad_start",
    "media": "missing_payload",
    "mark": "missing_mark_name",
    "dtmf": "bad_dtmf",
    "payload": "bad_frame",
}


def decode_frame(raw: str | bytes) -> TelnyxInbound:
    """One inbound text frame, typed; FrameError when it is not one Telnyx could send."""
    return decode_typed(_INBOUND, raw, _PART_REASONS, "start.custom_parameters")


def start_params(start: TelnyxStartInfo) -> dict[str, str] | None:
    """The start's parameters as text, or None when they are not a small object of scalars."""
    custom = start.custom_parameters
    if isinstance(custom, list):
        pairs: dict[str, str | int | float] = {}
        for item in custom:
            pairs[item.name] = item.value
        return text_params(pairs) if len(custom) == len(pairs) else None
    if custom is not None or not start.client_state:
        return text_params(custom)
    try:
        state = json.loads(base64.b64decode(start.client_state, validate=True))
    except (binascii.Error, ValueError):
        return None
    return text_params(state)


# ---------------------------------------------------------------------------- outbound


class TelnyxAudioOut(msgspec.Struct, frozen=True):
    """An outbound `media` object."""

    payload: bytes


class TelnyxMediaOut(msgspec.Struct, frozen=True, tag_field="event", tag="media"):
    """Agent audio for the call to play (PCMU, the stream's bidirectional codec)."""

    media: TelnyxAudioOut


class TelnyxMarkOut(msgspec.Struct, frozen=True, tag_field="event", tag="mark"):
    """Sent after an utterance's audio: it comes back once that audio has played."""

    mark: TelnyxMarkName


class TelnyxClear(msgspec.Struct, frozen=True, tag_field="event", tag="clear"):
    """Stop playing and drop the queued media; the queued marks come back at once."""


_OUTBOUND = msgspec.json.Encoder()


def media_frame(ulaw: bytes) -> str:
    """A `media` frame carrying μ-law audio."""
    return _OUTBOUND.encode(TelnyxMediaOut(TelnyxAudioOut(ulaw))).decode()


def mark_frame(name: str) -> str:
    """A `mark` frame."""
    return _OUTBOUND.encode(TelnyxMarkOut(TelnyxMarkName(name))).decode()


def clear_frame() -> str:
    """A `clear` frame."""
    return _OUTBOUND.encode(TelnyxClear()).decode()


class TelnyxWire:
    """A call's outbound side on a Telnyx media stream (a `CallWire`)."""

    def __init__(self, websocket: WebSocket, stream_id: str) -> None:
        self.websocket = websocket
        self.stream_id = stream_id

    async def _send(self, frame: str) -> None:
        # The call hung up mid-send: what was left is simply not heard.
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.websocket.send_text(frame)

    async def send_audio(self, ulaw: bytes) -> None:
        """One `media` frame."""
        await self._send(media_frame(ulaw))

    async def send_mark(self, name: str) -> None:
        """One `mark` frame; Telnyx returns it once the media before it played."""
        await self._send(mark_frame(name))

    async def send_clear(self) -> None:
        """One `clear` frame: Telnyx drops its queued media and returns its queued marks."""
        await self._send(clear_frame())


class TelnyxStream:
    """Telnyx media streaming as a `media_stream.Carrier`."""

    def decode(self, message: str | bytes) -> StreamFrame:
        """A text frame as what it means to the call."""
        if isinstance(message, bytes):
            raise FrameError("binary_frame")
        match decode_frame(message):
            case TelnyxStart(start=start, stream_id=stream_id):
                params = start_params(start)
                if params is None:
                    raise FrameError("bad_parameters")
                media_format = start.media_format or TelnyxMediaFormat()
                if media_format.encoding.upper() != "PCMU":
                    raise FrameError("unsupported_encoding", media_format.encoding)
                return StreamStart(
                    call_id=start.call_control_id, stream_id=stream_id, params=params
                )
            case TelnyxMedia(media=media):
                if media.track not in (None, "inbound", "inbound_track"):
                    return StreamNothing()
                return StreamMedia(media.payload)
            case TelnyxMark(mark=mark):
                return StreamMark(mark.name)
            case TelnyxDtmf(dtmf=dtmf):
                return StreamDtmf(dtmf.digit)
            case TelnyxStop():
                return StreamStop()
            case TelnyxError():
                raise FrameError("carrier_error")
            case TelnyxConnected():
                return StreamNothing()

    def wire(self, websocket: WebSocket, stream_id: str) -> TelnyxWire:
        """The call's outbound side on this stream."""
        return TelnyxWire(websocket, stream_id)
