"""What a carrier's media-stream frame means to a call, whatever the carrier's wire format.

Each carrier's wire module decodes its own frames at the edge (typed, with msgspec) and
maps each onto one of these; the stream loop (`media_stream`) only matches on them. A frame
that cannot be used raises `FrameError` with a stable reason: the label of
`holdline_telephony_frames_rejected_total`, the same for every carrier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# The keys of a telephone keypad (what a carrier's `dtmf` frame may carry).
Key = Literal["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#"]


class FrameError(Exception):
    """A frame that cannot be used; `reason` is the stable code recorded for it."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class StreamStart:
    """The call starts streaming: its id as the carrier gave it, the stream's own id, and the
    call-control document's parameters (already checked as text: `trust.text_params`)."""

    call_id: str
    stream_id: str | None
    params: dict[str, str]


@dataclass(frozen=True, slots=True)
class StreamMedia:
    """Caller audio, 8 kHz μ-law (converted at the carrier's edge when it sends another)."""

    ulaw: bytes


@dataclass(frozen=True, slots=True)
class StreamMark:
    """The agent's audio sent before the mark of this name has played."""

    name: str


@dataclass(frozen=True, slots=True)
class StreamDtmf:
    """A key press."""

    digit: str


@dataclass(frozen=True, slots=True)
class StreamStop:
    """The carrier ends the stream (the caller hung up)."""


@dataclass(frozen=True, slots=True)
class StreamNothing:
    """A frame with nothing for the call (a carrier's `connected`, a repeated start)."""


StreamFrame = StreamStart | StreamMedia | StreamMark | StreamDtmf | StreamStop | StreamNothing
