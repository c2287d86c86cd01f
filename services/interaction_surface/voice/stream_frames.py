"""What a carrier's media-stream frame means to a call, whatever the carrier's wire format.

Each carrier's wire module decodes its own frames at the edge (typed, with msgspec) and
maps each onto one of these; the stream loop (`media_stream`) only matches on them. A frame
that cannot be used raises `FrameError` with a stable reason: the label of
`holdline_telephony_frames_rejected_total`, the same for every carrier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


class FrameError(Exception):
    """A frame that cannot be used; `reason` is the stable code recorded for it."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


_AT = re.compile(r" - at `\$\.?(\w*)(.*)`$")
_MISSING = re.compile(r"^Object missing required field `(\w+)`")


def refusal_reason(detail: str, parts: Mapping[str, str], params_at: str) -> str:
    """The stable reason for msgspec's validation message about a carrier's JSON frame:
    `parts` maps the frame's top-level keys to reasons (`event` is the tag), and a failure
    under `params_at` (e.g. `start.customParameters`) is `bad_parameters`."""
    at = _AT.search(detail)
    if at is None:
        # The frame as a whole: not an object, or a part missing.
        missing = _MISSING.match(detail)
        if missing is None:
            return "not_an_object"
        part = missing.group(1)
        return "missing_event" if part == "event" else parts.get(part, "bad_frame")
    part, rest = at.groups()
    head, _, field = params_at.partition(".")
    if part == head and rest.startswith(f".{field}"):
        return "bad_parameters"
    if detail.startswith("Invalid base64"):
        return "invalid_base64"
    return parts.get(part, "bad_frame")


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
