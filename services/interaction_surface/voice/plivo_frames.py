"""Plivo audio streams' wire format: the frames a Plivo `<Stream>` sends, and the ones sent back.

Inbound frames (`start`, `media`, `dtmf`, `playedStream`, `clearedAudio`) decode into frozen
Structs, one union tagged on `event` (`decode_frame`); only the fields the edge reads are
declared. The `start` names the call (`callId`) and the stream (`streamId`) and carries, in
`extra_headers`, the `<Stream extraHeaders>` of the answer XML. Plivo allows only letters and
digits there (512 bytes at most), so holdline packs its parameters into one entry,
`holdline=<base32 of their JSON>` (`pack_parameters` / `unpack_extra_headers`). Media is
base64 μ-law 8 kHz, the `contentType` the answer XML asks for.

Outbound frames (`playAudio`, `checkpoint`, `clearAudio`) are sent by `PlivoWire`. A
`checkpoint` is Plivo's mark: Plivo answers `playedStream` with its name once the audio
queued before it was played out to the caller, and only then. After a `clearAudio` Plivo
answers `clearedAudio` and never plays (nor acknowledges) the checkpoints it dropped, so
what holdline counts as heard is a `playedStream` for a checkpoint with no clear sent while
it was pending; the call's playback ledger settles every pending utterance as unheard at
the moment it sends the clear, with no echo needed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
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
)
from .trust import text_params

# Plivo's limit on `extraHeaders`.
MAX_EXTRA_HEADERS = 512
# The entry of `extraHeaders` that carries holdline's parameters.
PARAMETERS_KEY = "holdline"
_ALNUM = re.compile(r"^[A-Za-z0-9]*$")

# ---------------------------------------------------------------------------- parameters


def pack_parameters(params: dict[str, str]) -> str:
    """The `extraHeaders` value carrying `params` (letters and digits only, as Plivo wants)."""
    raw = json.dumps(params, separators=(",", ":"), sort_keys=True).encode()
    return f"{PARAMETERS_KEY}={base64.b32encode(raw).decode().rstrip('=')}"


def unpack_extra_headers(raw: str | None) -> dict[str, str] | None:
    """The parameters in a start's `extra_headers` (empty when none; None when unusable).

    Plivo passes the `extraHeaders` string as given (`k=v` entries, `,` or `;` between them);
    a JSON object of them is taken too. A name may carry Plivo's `X-PH-` prefix.
    """
    if not raw:
        return {}
    if len(raw) > 4 * MAX_EXTRA_HEADERS:
        return None
    entries: dict[str, str] = {}
    text = raw.strip()
    if text.startswith("{"):
        try:
            decoded = json.loads(text)
        except ValueError:
            return None
        if not isinstance(decoded, dict):
            return None
        entries = {str(k): str(v) for k, v in decoded.items()}
    else:
        for entry in re.split(r"[,;]", text):
            name, sep, value = entry.strip().partition("=")
            if sep:
                entries[name.strip()] = value.strip()
    packed = next(
        (v for k, v in entries.items() if k.lower().removeprefix("x-ph-") == PARAMETERS_KEY),
        None,
    )
    if packed is None:
        return {}
    if not _ALNUM.match(packed):
        return None
    try:
        params = json.loads(base64.b32decode(packed.upper() + "=" * (-len(packed) % 8)))
    except (binascii.Error, ValueError):
        return None
    return text_params(params)


# ---------------------------------------------------------------------------- inbound


class PlivoMediaFormat(msgspec.Struct, frozen=True, rename="camel"):
    """The stream's audio: holdline's answer XML asks for μ-law at 8 kHz."""

    encoding: str = "audio/x-mulaw"
    sample_rate: int = 8000


class PlivoStartInfo(msgspec.Struct, frozen=True, rename="camel"):
    """The `start` object: the call, the stream, the media format."""

    call_id: str = ""
    stream_id: str | None = None
    media_format: PlivoMediaFormat | None = None


class PlivoStart(msgspec.Struct, frozen=True, tag_field="event", tag="start"):
    """The call starts streaming."""

    start: PlivoStartInfo
    extra_headers: str | None = None


class PlivoAudio(msgspec.Struct, frozen=True):
    """A `media` object: base64 μ-law on the wire."""

    payload: bytes
    track: str | None = None


class PlivoMedia(msgspec.Struct, frozen=True, tag_field="event", tag="media"):
    """Call audio (the caller's, on the inbound track)."""

    media: PlivoAudio


class PlivoDigit(msgspec.Struct, frozen=True):
    """A `dtmf` object: one key."""

    digit: Key


class PlivoDtmf(msgspec.Struct, frozen=True, tag_field="event", tag="dtmf"):
    """A key press."""

    dtmf: PlivoDigit


class PlivoPlayed(msgspec.Struct, frozen=True, tag_field="event", tag="playedStream"):
    """The audio queued before the checkpoint of this name was played out to the caller."""

    name: Annotated[str, msgspec.Meta(min_length=1)]


class PlivoCleared(msgspec.Struct, frozen=True, tag_field="event", tag="clearedAudio"):
    """Plivo dropped its queued audio (after our `clearAudio`); nothing in it is read."""


PlivoInbound = PlivoStart | PlivoMedia | PlivoDtmf | PlivoPlayed | PlivoCleared

_INBOUND = msgspec.json.Decoder(PlivoInbound)

_PART_REASONS = {
    "event": "unknown_event",
    "start": "bad_start",
    "extra_headers": "bad_parameters",
    "media": "missing_payload",
    "name": "missing_mark_name",
    "dtmf": "bad_dtmf",
}


def decode_frame(raw: str | bytes) -> PlivoInbound:
    """One inbound text frame, typed; FrameError when it is not one Plivo could send."""
    return decode_typed(_INBOUND, raw, _PART_REASONS)


# ---------------------------------------------------------------------------- outbound


class PlivoAudioOut(msgspec.Struct, frozen=True, rename="camel"):
    """An outbound `media` object."""

    payload: bytes
    content_type: str = "audio/x-mulaw"
    sample_rate: int = 8000


class PlivoPlayAudio(msgspec.Struct, frozen=True, tag_field="event", tag="playAudio",
                     rename="camel"):
    """Agent audio for the call to play."""

    stream_id: str
    media: PlivoAudioOut


class PlivoCheckpoint(msgspec.Struct, frozen=True, tag_field="event", tag="checkpoint",
                      rename="camel"):
    """Sent after an utterance's audio: `playedStream` comes back once it was played."""

    stream_id: str
    name: str


class PlivoClearAudio(msgspec.Struct, frozen=True, tag_field="event", tag="clearAudio",
                      rename="camel"):
    """Drop the queued audio (Plivo answers `clearedAudio`)."""

    stream_id: str


_OUTBOUND = msgspec.json.Encoder()


def play_frame(stream_id: str, ulaw: bytes) -> str:
    """A `playAudio` frame carrying μ-law audio."""
    return _OUTBOUND.encode(PlivoPlayAudio(stream_id, PlivoAudioOut(ulaw))).decode()


def checkpoint_frame(stream_id: str, name: str) -> str:
    """A `checkpoint` frame."""
    return _OUTBOUND.encode(PlivoCheckpoint(stream_id, name)).decode()


def clear_frame(stream_id: str) -> str:
    """A `clearAudio` frame."""
    return _OUTBOUND.encode(PlivoClearAudio(stream_id)).decode()


class PlivoWire:
    """A call's outbound side on a Plivo audio stream (a `CallWire`)."""

    def __init__(self, websocket: WebSocket, stream_id: str) -> None:
        self.websocket = websocket
        self.stream_id = stream_id

    async def _send(self, frame: str) -> None:
        # The call hung up mid-send: what was left is simply not heard.
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await self.websocket.send_text(frame)

    async def send_audio(self, ulaw: bytes) -> None:
        """One `playAudio` frame."""
        await self._send(play_frame(self.stream_id, ulaw))

    async def send_mark(self, name: str) -> None:
        """One `checkpoint`; Plivo answers `playedStream` once the audio before it played."""
        await self._send(checkpoint_frame(self.stream_id, name))

    async def send_clear(self) -> None:
        """One `clearAudio`: Plivo drops its queued audio (its checkpoints never come back)."""
        await self._send(clear_frame(self.stream_id))


class PlivoStream:
    """Plivo audio streams as a `media_stream.Carrier`."""

    def decode(self, message: str | bytes) -> StreamFrame:
        """A text frame as what it means to the call."""
        if isinstance(message, bytes):
            raise FrameError("binary_frame")
        match decode_frame(message):
            case PlivoStart(start=start, extra_headers=extra):
                params = unpack_extra_headers(extra)
                if params is None:
                    raise FrameError("bad_parameters")
                media_format = start.media_format or PlivoMediaFormat()
                if media_format.encoding.lower() != "audio/x-mulaw":
                    raise FrameError("unsupported_encoding", media_format.encoding)
                return StreamStart(call_id=start.call_id, stream_id=start.stream_id,
                                   params=params)
            case PlivoMedia(media=media):
                if media.track not in (None, "inbound"):
                    return StreamNothing()
                return StreamMedia(media.payload)
            case PlivoPlayed(name=name):
                return StreamMark(name)
            case PlivoDtmf(dtmf=dtmf):
                return StreamDtmf(dtmf.digit)
            case PlivoCleared():
                return StreamNothing()

    def wire(self, websocket: WebSocket, stream_id: str) -> PlivoWire:
        """The call's outbound side on this stream."""
        return PlivoWire(websocket, stream_id)
