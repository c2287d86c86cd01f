"""The `holdline` data channel's JSON frames (DESIGN §6d).

Sent to the page: `{"type": "mark", "name"}` after an utterance's audio went into the
track, `{"type": "clear"}` when the page must drop what it has queued, and `{"type":
"transcript", "role", "text"}` for display. From the page: the same `mark` frame once its
playback reached it. A frame that does not decode raises `FrameError` with a stable reason
(`malformed_json`, `not_an_object`, `unknown_frame`, `bad_mark`): the label it is counted under in
`holdline_telephony_frames_rejected_total`, as every carrier's bad frames are.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .stream_frames import FrameError

# The data channel's label; a channel of another label is ignored.
CHANNEL_LABEL = "holdline"


class PageMark(msgspec.Struct, frozen=True, tag_field="type", tag="mark"):
    """The page played the audio before this mark (or dropped it on a clear)."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]


_INBOUND = msgspec.json.Decoder(PageMark)


def decode_page_frame(raw: str | bytes) -> PageMark:
    """One frame from the page; FrameError when it is not one the page may send."""
    try:
        return _INBOUND.decode(raw)
    except msgspec.ValidationError as exc:
        detail = str(exc)
        if "`$.type`" in detail:
            reason = "unknown_frame"
        elif detail.startswith("Expected `object`"):
            reason = "not_an_object"
        else:
            reason = "bad_mark"
        raise FrameError(reason, detail) from None
    except msgspec.DecodeError as exc:
        raise FrameError("malformed_json", str(exc)) from None


class MarkOut(msgspec.Struct, frozen=True, tag_field="type", tag="mark"):
    """The audio before this mark is in the track; return it once played."""

    name: str


class ClearOut(msgspec.Struct, frozen=True, tag_field="type", tag="clear"):
    """Drop the queued audio and return every pending mark at once."""


class TranscriptOut(msgspec.Struct, frozen=True, tag_field="type", tag="transcript"):
    """A line of the conversation, for display."""

    role: Literal["user", "assistant"]
    text: str


_OUTBOUND = msgspec.json.Encoder()


def mark_frame(name: str) -> str:
    """A `mark` frame."""
    return _OUTBOUND.encode(MarkOut(name)).decode()


def clear_frame() -> str:
    """A `clear` frame."""
    return _OUTBOUND.encode(ClearOut()).decode()


def transcript_frame(role: Literal["user", "assistant"], text: str) -> str:
    """A `transcript` frame."""
    return _OUTBOUND.encode(TranscriptOut(role, text)).decode()
