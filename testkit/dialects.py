"""The carriers' stream protocols as a test phone speaks them (`testkit.phone.Phone`'s
`dialect`): Twilio Media Streams, Telnyx media streaming and Plivo audio streams.

A dialect builds the frames a carrier sends (the opening `connected`/`start`, `media`,
`dtmf`, `stop`, a returned mark) and reads the ones the agent sends back into what they do
to the phone: audio to play, a mark to return once played, a clear. Twilio and Telnyx
return every pending mark at once on a clear; Plivo answers `clearedAudio` and never
returns the dropped checkpoints (`echoes_marks_on_clear`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from services.interaction_surface.voice.plivo_frames import pack_parameters
from services.interaction_surface.voice.twilio import twilio_signature

AUTH_TOKEN = "twilio-test-token"
Kind = Literal["media", "mark", "clear", "other"]


def _b64(audio: bytes) -> str:
    return base64.b64encode(audio).decode()


class Dialect(Protocol):
    """One carrier's stream protocol, from the phone's side."""

    @property
    def path(self) -> str:
        """The stream route's path on the surface."""

    @property
    def echoes_marks_on_clear(self) -> bool:
        """Whether a clear returns every pending mark at once."""

    def headers(self, url: str) -> dict[str, str]:
        """The upgrade's headers (a signature, for a carrier that signs it)."""

    def opening(self, stream_id: str, call_id: str, params: dict[str, str],
                extra: dict[str, Any]) -> list[dict[str, Any]]:
        """The frames that open the stream (`connected`, `start`)."""

    def media(self, stream_id: str, chunk: int, audio: bytes) -> dict[str, Any]:
        """One frame of the caller's audio."""

    def dtmf(self, stream_id: str, chunk: int, digit: str) -> dict[str, Any]:
        """One key press."""

    def stop(self, stream_id: str, call_id: str) -> dict[str, Any] | None:
        """The hang-up frame (None: the carrier just closes)."""

    def mark(self, stream_id: str, name: str) -> dict[str, Any]:
        """A mark returned once played."""

    def cleared(self, stream_id: str) -> dict[str, Any] | None:
        """What the carrier answers a clear with, besides any marks."""

    def read(self, message: dict[str, Any]) -> tuple[Kind, bytes | str | None]:
        """What an agent frame does: audio, a mark's name, a clear, or nothing."""


@dataclass(frozen=True)
class TwilioDialect:
    """Twilio Media Streams (numeric fields as strings; the upgrade signed)."""

    path: str = "/v1/telephony/twilio"
    echoes_marks_on_clear: bool = True

    def headers(self, url: str) -> dict[str, str]:
        return {"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, url, {})}

    def opening(self, stream_id: str, call_id: str, params: dict[str, str],
                extra: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"event": "connected", "protocol": "Call", "version": "1.0.0"},
            {
                "event": "start",
                "sequenceNumber": "1",
                "start": {
                    "streamSid": stream_id,
                    "accountSid": "AC" + "0" * 32,
                    "callSid": call_id,
                    "tracks": ["inbound"],
                    "customParameters": params,
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000,
                                    "channels": 1},
                    **extra,
                },
                "streamSid": stream_id,
            },
        ]

    def media(self, stream_id: str, chunk: int, audio: bytes) -> dict[str, Any]:
        message: dict[str, Any] = {
            "event": "media",
            "streamSid": stream_id,
            "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20),
                      "payload": _b64(audio)},
        }
        # Twilio's sequenceNumber is optional for the server: send it on every other frame.
        if chunk % 2:
            message["sequenceNumber"] = str(chunk + 1)
        return message

    def dtmf(self, stream_id: str, chunk: int, digit: str) -> dict[str, Any]:
        return {"event": "dtmf", "streamSid": stream_id, "sequenceNumber": str(chunk),
                "dtmf": {"track": "inbound_track", "digit": digit}}

    def stop(self, stream_id: str, call_id: str) -> dict[str, Any] | None:
        return {"event": "stop", "streamSid": stream_id, "stop": {"callSid": call_id}}

    def mark(self, stream_id: str, name: str) -> dict[str, Any]:
        return {"event": "mark", "streamSid": stream_id, "mark": {"name": name}}

    def cleared(self, stream_id: str) -> dict[str, Any] | None:
        return None

    def read(self, message: dict[str, Any]) -> tuple[Kind, bytes | str | None]:
        kind = message.get("event")
        if kind == "media":
            return "media", base64.b64decode(message["media"]["payload"])
        if kind == "mark":
            return "mark", str(message["mark"]["name"])
        if kind == "clear":
            return "clear", None
        return "other", None


@dataclass(frozen=True)
class TelnyxDialect:
    """Telnyx media streaming (snake_case, `custom_parameters` from the TeXML)."""

    path: str = "/v1/telephony/telnyx"
    echoes_marks_on_clear: bool = True

    def headers(self, url: str) -> dict[str, str]:
        return {}

    def opening(self, stream_id: str, call_id: str, params: dict[str, str],
                extra: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"event": "connected", "version": "1.0.0"},
            {
                "event": "start", "sequence_number": "1", "stream_id": stream_id,
                "start": {
                    "user_id": "3e6f995f-85f7-4705-9741-53b116d28237",
                    "call_control_id": call_id, "call_session_id": f"cs-{call_id}",
                    "from": "+15550100", "to": "+15550199", "custom_parameters": params,
                    "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
                    **extra,
                },
            },
        ]

    def media(self, stream_id: str, chunk: int, audio: bytes) -> dict[str, Any]:
        return {"event": "media", "sequence_number": str(chunk + 1), "stream_id": stream_id,
                "media": {"track": "inbound", "chunk": str(chunk),
                          "timestamp": str(chunk * 20), "payload": _b64(audio)}}

    def dtmf(self, stream_id: str, chunk: int, digit: str) -> dict[str, Any]:
        return {"event": "dtmf", "sequence_number": str(chunk + 1), "stream_id": stream_id,
                "occurred_at": "2026-12-08T00:00:00.000000Z", "dtmf": {"digit": digit}}

    def stop(self, stream_id: str, call_id: str) -> dict[str, Any] | None:
        return {"event": "stop", "stream_id": stream_id,
                "stop": {"call_control_id": call_id}}

    def mark(self, stream_id: str, name: str) -> dict[str, Any]:
        return {"event": "mark", "stream_id": stream_id, "mark": {"name": name}}

    def cleared(self, stream_id: str) -> dict[str, Any] | None:
        return None

    def read(self, message: dict[str, Any]) -> tuple[Kind, bytes | str | None]:
        kind = message.get("event")
        if kind == "media":
            return "media", base64.b64decode(message["media"]["payload"])
        if kind == "mark":
            return "mark", str(message["mark"]["name"])
        if kind == "clear":
            return "clear", None
        return "other", None


@dataclass(frozen=True)
class PlivoDialect:
    """Plivo audio streams (`extra_headers`, `playAudio`/`checkpoint`/`clearAudio` back)."""

    path: str = "/v1/telephony/plivo"
    echoes_marks_on_clear: bool = False

    def headers(self, url: str) -> dict[str, str]:
        return {}

    def opening(self, stream_id: str, call_id: str, params: dict[str, str],
                extra: dict[str, Any]) -> list[dict[str, Any]]:
        return [{
            "event": "start", "sequenceNumber": 1,
            "start": {
                "callId": call_id, "streamId": stream_id, "accountId": "MA" + "0" * 18,
                "tracks": ["inbound"],
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000},
                **extra,
            },
            "extra_headers": pack_parameters(params) if params else "",
        }]

    def media(self, stream_id: str, chunk: int, audio: bytes) -> dict[str, Any]:
        return {"event": "media", "sequenceNumber": chunk + 1, "streamId": stream_id,
                "media": {"track": "inbound", "timestamp": str(1_700_000_000_000 + chunk * 20),
                          "chunk": chunk, "payload": _b64(audio)}}

    def dtmf(self, stream_id: str, chunk: int, digit: str) -> dict[str, Any]:
        return {"event": "dtmf", "sequenceNumber": chunk + 1, "streamId": stream_id,
                "dtmf": {"track": "inbound", "digit": digit, "timestamp": str(chunk)}}

    def stop(self, stream_id: str, call_id: str) -> dict[str, Any] | None:
        return None

    def mark(self, stream_id: str, name: str) -> dict[str, Any]:
        return {"event": "playedStream", "sequenceNumber": 0, "streamId": stream_id,
                "name": name}

    def cleared(self, stream_id: str) -> dict[str, Any] | None:
        return {"event": "clearedAudio", "sequenceNumber": 0, "streamId": stream_id}

    def read(self, message: dict[str, Any]) -> tuple[Kind, bytes | str | None]:
        kind = message.get("event")
        if kind == "playAudio":
            return "media", base64.b64decode(message["media"]["payload"])
        if kind == "checkpoint":
            return "mark", str(message["name"])
        if kind == "clearAudio":
            return "clear", None
        return "other", None


TWILIO = TwilioDialect()
TELNYX = TelnyxDialect()
PLIVO = PlivoDialect()
