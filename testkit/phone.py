"""A carrier's media-stream client: a phone on a real WebSocket, with real audio.

It speaks one carrier's protocol (its `dialect`, `testkit.dialects`: Twilio by default,
Telnyx, Plivo): it sends what the carrier sends (the opening `start` with the call-control
document's parameters, caller audio as μ-law in 20 ms frames, key presses, the hang-up),
signs the upgrade like Twilio when the dialect does, and plays the agent's media back on a
clock: a mark returns once the audio queued before it has had time to play, or, when a
clear flushes it, at once for carriers that echo marks on a clear (Twilio, Telnyx) and
never for those that do not (Plivo's checkpoints) — exactly as the carrier does.

The playout model and the utterances are the carrier-neutral part (`_heard_media`,
`_heard_mark`, `_heard_clear`); the frame methods (`_send_audio`, `_send_stop`, `_receive`,
`_send_mark`) speak the dialect's JSON frames, and `carrier_phones` overrides them for a
carrier whose stream is not one of those (Vonage's binary audio, Exotel's PCM).

The playout model is per media frame: each plays when it arrives or when the audio before
it ends, whichever is later. A frame that arrives after the line ran dry within an
utterance leaves a gap, noted on the utterance (`gaps`, seconds): what a caller hears as
silence in the middle of the agent's sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import unescape

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from services.interaction_surface.voice.codec import ULAW_FRAME_BYTES, silence_ulaw, ulaw_ms
from services.interaction_surface.voice.engines.base import synthesize
from services.interaction_surface.voice.engines.espeak import EspeakTts
from services.interaction_surface.voice.twilio import twilio_signature

from .dialects import AUTH_TOKEN as TWILIO_AUTH_TOKEN
from .dialects import TWILIO, Dialect

AUTH_TOKEN = TWILIO_AUTH_TOKEN

# The mark of an utterance a clear cut before its own mark was sent.
CUT = "(cut)"
_TTS = EspeakTts()
_PARAMETER = re.compile(r'<Parameter name="([^"]*)" value="([^"]*)"/>')


def twiml_parameters(twiml: str) -> dict[str, str]:
    """The `<Parameter>`s of a `<Stream>`: what Twilio puts in `start.customParameters`."""
    return {unescape(k, {"&quot;": '"'}): unescape(v, {"&quot;": '"'})
            for k, v in _PARAMETER.findall(twiml)}


async def answered(base_url: str, call_sid: str, query: str = "") -> dict[str, str]:
    """Twilio's first step of a call: POST the signed voice webhook for `call_sid` and
    return the stream parameters (the call ticket among them) its TwiML names."""
    path = "/v1/telephony/twilio/voice" + (f"?{query}" if query else "")
    form = {"CallSid": call_sid, "From": "+15550100", "To": "+15550199"}
    signature = twilio_signature(AUTH_TOKEN, base_url.rstrip("/") + path, form)
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        answer = await http.post(path, data=form, headers={"X-Twilio-Signature": signature})
    assert answer.status_code == 200, answer.text
    return twiml_parameters(answer.text)


async def speech(text: str, *, tail_silence_ms: int = 800) -> bytes:
    """Real speech: espeak-ng → μ-law 8 kHz, followed by silence for endpointing."""
    return await synthesize(_TTS, text) + silence_ulaw(tail_silence_ms)


@dataclass
class Utterance:
    """Agent audio received up to one mark."""

    mark: str
    audio_ms: int
    returned_at: float | None = None
    flushed: bool = False
    # When its first media frame arrived (monotonic): the phone's outbound timeline.
    began_at: float | None = None
    # Silences inside it: the line ran dry before its next frame came (seconds).
    gaps: list[float] = field(default_factory=list, repr=False)
    # Every byte of its audio, in order.
    audio: bytes = field(default=b"", repr=False)


@dataclass
class Phone:
    """One call. `play=False`: the line is dead, marks never come back (audio never plays)."""

    base_url: str
    params: dict[str, str]
    play: bool = True
    speed: float = 1.0
    dialect: Dialect = TWILIO
    ws: ClientConnection | None = None
    stream_sid: str = field(default_factory=lambda: f"MZ{uuid.uuid4().hex}")
    call_sid: str = field(default_factory=lambda: f"CA{uuid.uuid4().hex}")
    utterances: list[Utterance] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    inbound: list[dict[str, Any]] = field(default_factory=list)
    _unmarked_ms: int = 0
    _play_until: float = 0.0
    _timers: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    _reader: asyncio.Task[None] | None = None
    _chunk: int = 0
    _first_media: float | None = None
    _gaps: list[float] = field(default_factory=list)
    _audio: bytearray = field(default_factory=bytearray)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        """The stream URL."""
        return self.base_url.replace("http://", "ws://").rstrip("/") + self.dialect.path

    async def dial(self, *, start: bool = True, extra: dict[str, Any] | None = None) -> None:
        """Connect (signed when the carrier signs), then the opening frames; with
        `start=False` only those before the `start`."""
        self.ws = await connect(self.url, additional_headers=self.dialect.headers(self.url))
        self._reader = asyncio.create_task(self._read())
        for frame in self.dialect.opening(self.stream_sid, self.call_sid, self.params,
                                          extra or {}):
            if frame.get("event") == "start" and not start:
                break
            await self.send(frame)

    async def send(self, message: dict[str, Any] | str | bytes) -> None:
        """Send a frame as is (dicts as JSON)."""
        assert self.ws is not None
        await self.ws.send(json.dumps(message) if isinstance(message, dict) else message)

    async def talk(self, ulaw: bytes, *, realtime: bool = True) -> None:
        """Stream audio as 20 ms media frames; at real-time pace unless told otherwise."""
        start = time.monotonic()
        for index in range(0, len(ulaw), ULAW_FRAME_BYTES):
            frame = ulaw[index : index + ULAW_FRAME_BYTES]
            self._chunk += 1
            await self._send_audio(frame)
            if realtime:
                delay = start + (index // ULAW_FRAME_BYTES + 1) * 0.02 - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)

    async def press(self, digits: str) -> None:
        """Key presses, one `dtmf` message per digit, as the carrier sends them."""
        for digit in digits:
            self._chunk += 1
            await self.send(self.dialect.dtmf(self.stream_sid, self._chunk, digit))

    async def hang_up(self, *, stop: bool = True) -> None:
        """`stop` (when the carrier sends one) then close, or just drop the connection."""
        assert self.ws is not None
        if stop:
            await self._send_stop()
        await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
        for timer in self._timers.values():
            timer.cancel()

    async def _read(self) -> None:
        with contextlib.suppress(ConnectionClosed):
            await self._read_frames()

    async def _read_frames(self) -> None:
        assert self.ws is not None
        async for raw in self.ws:
            await self._receive(raw)
            self._changed.set()

    async def _send_audio(self, frame: bytes) -> None:
        """One 20 ms frame of the caller's μ-law audio, in this carrier's frame."""
        await self.send(self.dialect.media(self.stream_sid, self._chunk, frame))

    async def _send_stop(self) -> None:
        """The carrier's hang-up frame, if it sends one."""
        frame = self.dialect.stop(self.stream_sid, self.call_sid)
        if frame is not None:
            await self.send(frame)

    async def _send_mark(self, name: str) -> None:
        """A mark going back: its audio has played."""
        await self.send(self.dialect.mark(self.stream_sid, name))

    async def _receive(self, raw: str | bytes) -> None:
        """One frame from the surface, in this carrier's format."""
        message = json.loads(raw)
        self.inbound.append(message)
        kind, value = self.dialect.read(message)
        now = time.monotonic()
        if kind == "media":
            assert isinstance(value, bytes)
            self._heard_media(value, now)
        elif kind == "mark":
            assert isinstance(value, str)
            self._heard_mark(value, now)
        elif kind == "clear":
            await self._heard_clear(now)

    def _heard_media(self, audio: bytes, now: float) -> None:
        """Agent audio (μ-law 8 kHz) arrived: it plays after what is queued."""
        if self._first_media is None:
            self._first_media = now
        elif now > self._play_until:
            self._gaps.append(now - self._play_until)
        self._play_until = max(self._play_until, now) + ulaw_ms(audio) / 1000 / self.speed
        self._audio.extend(audio)
        self._unmarked_ms += ulaw_ms(audio)

    def _heard_mark(self, name: str, now: float) -> None:
        """A mark after the audio so far: it goes back once that audio has played."""
        utterance = Utterance(
            name, self._unmarked_ms, began_at=self._first_media,
            gaps=self._gaps, audio=bytes(self._audio),
        )
        self._unmarked_ms = 0
        self._gaps = []
        self._audio = bytearray()
        self.utterances.append(utterance)
        self._first_media = None
        if self.play:
            self._timers[name] = asyncio.create_task(
                self._return_mark(utterance, self._play_until - now)
            )

    async def _heard_clear(self, now: float) -> None:
        """A clear: queued audio is dropped; pending marks go back at once on carriers that
        echo them (Twilio, Telnyx), never on those that do not (Plivo)."""
        self.clears.append(now)
        if self._unmarked_ms:
            # Sent at the pace it plays, a cut utterance's mark never came: its
            # audio so far is kept under the mark CUT.
            self.utterances.append(Utterance(
                CUT, self._unmarked_ms, returned_at=now, flushed=True,
                began_at=self._first_media, gaps=self._gaps, audio=bytes(self._audio),
            ))
        self._play_until = now
        self._unmarked_ms = 0
        self._first_media = None
        self._gaps = []
        self._audio = bytearray()
        for utterance in self.utterances:
            if utterance.returned_at is None and not utterance.flushed:
                timer = self._timers.pop(utterance.mark, None)
                if timer is not None:
                    timer.cancel()
                utterance.flushed = True
                if self.dialect.echoes_marks_on_clear:
                    await self._mark(utterance)
        cleared = self.dialect.cleared(self.stream_sid)
        if cleared is not None:
            await self.send(cleared)

    async def _return_mark(self, utterance: Utterance, delay: float) -> None:
        await asyncio.sleep(max(delay, 0.0))
        await self._mark(utterance)

    async def _mark(self, utterance: Utterance) -> None:
        utterance.returned_at = time.monotonic()
        self._timers.pop(utterance.mark, None)
        self._changed.set()
        await self._send_mark(utterance.mark)

    def media_ms(self) -> int:
        """Agent audio received so far."""
        return sum(u.audio_ms for u in self.utterances) + self._unmarked_ms

    async def wait_for(
        self, mark: str, timeout_s: float = 20.0, *, returned: bool = False
    ) -> Utterance:
        """Until the agent sent the mark named `mark` (its audio is all here), and with
        `returned` until the phone also played it and sent the mark back."""
        deadline = time.monotonic() + timeout_s
        while True:
            for utterance in self.utterances:
                if utterance.mark == mark and (not returned or utterance.returned_at):
                    return utterance
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"mark {mark} never came; got {self.utterances}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                continue

    async def wait_playing(self, ms: int, timeout_s: float = 20.0) -> None:
        """Until the utterance arriving now has at least `ms` of its audio here: the point in
        its playback a caller cuts in at (the agent sends audio at the pace it plays)."""
        deadline = time.monotonic() + timeout_s
        while self._unmarked_ms < ms:
            if time.monotonic() > deadline:
                raise AssertionError(f"no utterance reached {ms} ms; got {self.utterances}")
            await asyncio.sleep(0.01)

    async def wait_audio(self, timeout_s: float = 20.0) -> None:
        """Until some agent audio arrived."""
        deadline = time.monotonic() + timeout_s
        while self.media_ms() == 0:
            if time.monotonic() > deadline:
                raise AssertionError("no agent audio arrived")
            await asyncio.sleep(0.01)
