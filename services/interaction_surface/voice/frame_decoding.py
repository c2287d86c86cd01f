"""Decoding a carrier's JSON frames at the edge, the same way for every carrier.

Each carrier's wire module declares its inbound frames as frozen msgspec Structs (one union
tagged on `event`) and decodes with `decode_typed`: a frame that does not decode raises
`FrameError` with a stable reason, chosen by the part of the frame msgspec names in its
message (`refusal_reason`), so `holdline_telephony_frames_rejected_total` has the same labels
for every carrier.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

import msgspec

from .stream_frames import FrameError

T = TypeVar("T")

_AT = re.compile(r" - at `\$\.?(\w*)(.*)`$")
_MISSING = re.compile(r"^Object missing required field `(\w+)`")


def refusal_reason(detail: str, parts: Mapping[str, str], parameters: str) -> str:
    """The stable reason for msgspec's validation message about a frame: `parts` maps a
    frame's top-level field to its reason; a failure under `parameters` (a path below the
    start, e.g. `start.custom_parameters`) is `bad_parameters`."""
    at = _AT.search(detail)
    if at is None:
        # The frame as a whole: not an object, or a part missing.
        missing = _MISSING.match(detail)
        if missing is None:
            return "not_an_object"
        part = missing.group(1)
        return "missing_event" if part == "event" else parts.get(part, "bad_frame")
    part, rest = at.groups()
    if parameters and f"{part}{rest}".startswith(parameters):
        return "bad_parameters"
    if detail.startswith("Invalid base64") and parts.get(part) == "missing_payload":
        return "invalid_base64"
    return parts.get(part, "bad_frame")


def decode_typed(
    decoder: msgspec.json.Decoder[T], raw: str | bytes, parts: Mapping[str, str],
    parameters: str = "",
) -> T:
    """One inbound text frame, typed; FrameError (stable reason) when it does not decode."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise FrameError(refusal_reason(str(exc), parts, parameters), str(exc)) from None
    except msgspec.DecodeError as exc:
        raise FrameError("malformed_json", str(exc)) from None
