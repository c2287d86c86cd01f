"""Phones that speak Vonage's and Exotel's stream protocols, with real audio.

Each is `testkit.phone.Phone` (the playout model, the utterances, `talk`, `wait_*`) with its
carrier's frames: what the carrier sends on the socket, and its webhook step (`*_answered`:
the signed or authenticated request the carrier makes when a call comes in, returning the
stream parameters the answer names, the call ticket among them).

- `VonagePhone`: `websocket:connected` with the NCCO's headers, then binary L16 at 16 kHz in
  20 ms messages, `websocket:dtmf`; agent audio arrives as binary L16. Vonage returns no
  marks and takes no clear: the phone just plays what arrives.
- `ExotelPhone`: `connected`, `start` (snake_case, `custom_parameters`), `media` base64
  16-bit PCM 8 kHz, `dtmf`, `stop`, HTTP Basic on the upgrade; agent `media` (PCM), `mark`
  and `clear` are handled as Exotel does (marks once played, all at once on a clear).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import jwt
from websockets.asyncio.client import connect

from libs.bus import Context, Topology, read_subject
from libs.bus import connect as bus_connect
from libs.config import BusSettings
from libs.events import INTERACTION, SessionOpened
from services.interaction_surface.voice.codec import LinearLine, pcm16_to_ulaw, ulaw_to_pcm16

from .phone import Phone

VONAGE_SECRET = "vonage-signature-secret-for-tests-" + "0123456789" * 3
EXOTEL_USER = "exotel-test"
EXOTEL_PASSWORD = "exotel-test-password"
CARRIER_ENV = {
    "VONAGE_SIGNATURE_SECRET": VONAGE_SECRET,
    "EXOTEL_STREAM_USER": EXOTEL_USER,
    "EXOTEL_STREAM_PASSWORD": EXOTEL_PASSWORD,
}


def vonage_token(body: bytes, secret: str = VONAGE_SECRET, **claims: Any) -> str:
    """A signed-webhook token as Vonage makes one for `body`."""
    base: dict[str, Any] = {
        "iat": int(time.time()), "jti": str(uuid.uuid4()), "iss": "Vonage",
        "payload_hash": hashlib.sha256(body).hexdigest(), "api_key": "abcd1234",
        "application_id": str(uuid.UUID(int=1)),
    }
    return jwt.encode({**base, **claims}, secret, algorithm="HS256")


async def vonage_answered(base_url: str, call_uuid: str, query: str = "") -> dict[str, Any]:
    """Vonage's first step of a call: POST the signed answer webhook; the NCCO's endpoint."""
    body = json.dumps({"from": "447700900000", "to": "447700900001", "uuid": call_uuid,
                       "conversation_uuid": f"CON-{call_uuid}"}).encode()
    path = "/v1/telephony/vonage/answer" + (f"?{query}" if query else "")
    headers = {"Authorization": f"Bearer {vonage_token(body)}",
               "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        answer = await http.post(path, content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    endpoint: dict[str, Any] = answer.json()[0]["endpoint"][0]
    return endpoint


def basic(user: str = EXOTEL_USER, password: str = EXOTEL_PASSWORD) -> str:
    """An `Authorization: Basic` value."""
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


async def exotel_answered(base_url: str, call_sid: str, query: str = "") -> dict[str, str]:
    """Exotel's Voicebot applet asking its URL for the stream: the custom parameters."""
    path = f"/v1/telephony/exotel/voicebot?CallSid={call_sid}&CallFrom=09876543210" + (
        f"&{query}" if query else ""
    )
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        answer = await http.get(path, headers={"Authorization": basic()})
    assert answer.status_code == 200, answer.text
    return dict(parse_qsl(urlsplit(answer.json()["url"]).query))


@dataclass
class VonagePhone(Phone):
    """One call over Vonage's WebSocket protocol (L16 at `rate`)."""

    rate: int = 16000
    line: LinearLine = field(init=False)
    # The size of every binary message the surface sent (Vonage wants exactly 20 ms).
    frame_sizes: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.line = LinearLine(self.rate)

    @property
    def url(self) -> str:
        """The stream URL."""
        return self.base_url.replace("http://", "ws://").rstrip("/") + "/v1/telephony/vonage"

    async def dial(self, *, start: bool = True, extra: dict[str, Any] | None = None) -> None:
        """Connect, then `websocket:connected` with the NCCO's headers."""
        self.ws = await connect(self.url)
        self._reader = asyncio.create_task(self._read())
        if start:
            await self.send({"event": "websocket:connected",
                             "content-type": f"audio/l16;rate={self.rate}",
                             **self.params, **(extra or {})})

    async def _send_audio(self, frame: bytes) -> None:
        assert self.ws is not None
        await self.ws.send(self.line.from_ulaw(frame))

    async def press(self, digits: str) -> None:
        """`websocket:dtmf`, one message per digit."""
        for digit in digits:
            await self.send({"event": "websocket:dtmf", "digit": digit, "duration": 260})

    async def _send_stop(self) -> None:
        """Vonage ends a call by closing the socket."""

    async def _receive(self, raw: str | bytes) -> None:
        if isinstance(raw, bytes):
            self.frame_sizes.add(len(raw))
            self._heard_media(self.line.to_ulaw(raw), time.monotonic())
        else:
            self.inbound.append(json.loads(raw))


@dataclass
class ExotelPhone(Phone):
    """One call over Exotel's Voicebot stream protocol (PCM 8 kHz)."""

    auth: str | None = field(default_factory=basic)

    @property
    def url(self) -> str:
        """The stream URL."""
        return self.base_url.replace("http://", "ws://").rstrip("/") + "/v1/telephony/exotel"

    async def dial(self, *, start: bool = True, extra: dict[str, Any] | None = None) -> None:
        """Connect (with the applet URL's Basic credentials), then `connected` and `start`."""
        headers = {"Authorization": self.auth} if self.auth else {}
        self.ws = await connect(self.url, additional_headers=headers)
        self._reader = asyncio.create_task(self._read())
        await self.send({"event": "connected"})
        if start:
            await self.send({
                "event": "start", "sequence_number": "1", "stream_sid": self.stream_sid,
                "start": {
                    "stream_sid": self.stream_sid, "call_sid": self.call_sid,
                    "account_sid": "exotel-test", "from": "09876543210", "to": "08047491899",
                    "custom_parameters": self.params,
                    "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000",
                                     "bit_rate": "16"},
                    **(extra or {}),
                },
            })

    async def _send_audio(self, frame: bytes) -> None:
        await self.send({
            "event": "media", "sequence_number": str(self._chunk + 1),
            "stream_sid": self.stream_sid,
            "media": {"chunk": str(self._chunk), "timestamp": str(self._chunk * 20),
                      "payload": base64.b64encode(ulaw_to_pcm16(frame)).decode()},
        })

    async def press(self, digits: str) -> None:
        """`dtmf`, one frame per digit."""
        for digit in digits:
            await self.send({"event": "dtmf", "stream_sid": self.stream_sid,
                             "dtmf": {"digit": digit, "duration": "100"}})

    async def _send_stop(self) -> None:
        await self.send({"event": "stop", "stream_sid": self.stream_sid,
                         "stop": {"call_sid": self.call_sid, "reason": "callended"}})

    async def _receive(self, raw: str | bytes) -> None:
        message = json.loads(raw)
        self.inbound.append(message)
        kind = message.get("event")
        now = time.monotonic()
        if kind == "media":
            pcm = base64.b64decode(message["media"]["payload"])
            assert len(pcm) % 320 == 0, f"an Exotel chunk of {len(pcm)} bytes"
            self._heard_media(pcm16_to_ulaw(pcm), now)
        elif kind == "mark":
            self._heard_mark(message["mark"]["name"], now)
        elif kind == "clear":
            await self._heard_clear(now)

    async def _send_mark(self, name: str) -> None:
        await self.send({"event": "mark", "stream_sid": self.stream_sid,
                         "mark": {"name": name}})


async def sessions_opened(nats_url: str, prefix: str, user: str) -> list[str]:
    """Session ids the durable record opened for `user` (read from the broker)."""
    nc = await bus_connect(BusSettings(nats_url=nats_url, prefix=prefix), name="carriers-test")
    try:
        replayed = await read_subject(
            nc.jetstream(), Topology(prefix).stream_name(Context.INTERACTION),
            f"{prefix}.interaction.>", INTERACTION,
        )
    finally:
        await nc.close()
    return sorted({
        i.envelope.session_id for i in replayed.items
        if isinstance(i.envelope.event, SessionOpened) and i.envelope.event.user_id == user
    })
