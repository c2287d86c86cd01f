"""A local Deepgram: its WebSocket STT and HTTP TTS wire protocol on 127.0.0.1, for real.

What it does like the vendor: checks `Authorization: Token <key>` and the query (encoding,
sample rate, channels, booleans, endpointing) and refuses with the vendor's status and
`{err_code, err_msg, request_id}` body; reads binary μ-law frames as they come, counting
bytes and arrival times; answers `Results` (interim guesses while speech goes on, then
`is_final` + `speech_final` once `endpointing` ms of silence followed it — judged on the
audio's own clock, so timing follows the caller's real pace); honours `KeepAlive`, and on
`CloseStream` flushes, sends `Metadata` and closes with 1000; closes with 1011 `NET-0001`
after 10 s without audio or KeepAlive. TTS renders real μ-law speech with espeak-ng and
streams it in several chunks, noticing when the client goes away.

What it does not: recognise speech. It is primed with the transcripts to return, in order,
one per utterance (consumed only when finalised, so a dropped stream's replay gets the same
words). Faults are scripted: handshake statuses, a drop after N audio bytes, TTS statuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from services.interaction_surface.voice.codec import RATE, ULAW_FRAME_BYTES, rms, ulaw_to_pcm16
from services.interaction_surface.voice.engines.base import synthesize
from services.interaction_surface.voice.engines.espeak import EspeakTts

ENCODINGS = {"linear16", "flac", "mulaw", "alaw", "amr-nb", "amr-wb", "opus", "speex", "g729"}
TTS_ENCODINGS = {"linear16", "mulaw", "alaw", "mp3", "opus", "flac", "aac"}
TTS_MULAW_RATES = {8000, 16000}
MAX_TTS_CHARS = 2000
# PCM16 RMS above which a 20 ms frame counts as speech (espeak speech is far above).
VOICED_RMS = 300
ERROR_CODES = {
    400: "Bad Request", 401: "INVALID_AUTH", 402: "ASR_PAYMENT_REQUIRED", 403: "ACCESS_DENIED",
    429: "TOO_MANY_REQUESTS", 500: "INTERNAL_SERVER_ERROR", 503: "SERVICE_UNAVAILABLE",
}


@dataclass
class Listen:
    """One `/v1/listen` stream as the fake saw it."""

    params: dict[str, str]
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    audio: bytearray = field(default_factory=bytearray)
    first_audio_at: float | None = None
    last_audio_at: float | None = None
    keepalives: int = 0
    close_stream: bool = False
    close_code: int | None = None
    sent: list[dict[str, Any]] = field(default_factory=list)
    finals_at: list[float] = field(default_factory=list)

    def results(self, *, final: bool | None = None) -> list[dict[str, Any]]:
        """The `Results` messages sent (only finals / only interims when asked)."""
        return [m for m in self.sent if m["type"] == "Results"
                and (final is None or m["is_final"] == final)]


@dataclass
class Speak:
    """One `/v1/speak` request as the fake saw it."""

    text: str
    params: dict[str, str]
    received_at: float
    audio: bytes = b""
    chunks_total: int = 0
    chunks_sent: int = 0
    bytes_sent: int = 0
    first_byte_at: float | None = None
    completed: bool = False
    disconnected: bool = False


@dataclass
class _Segment:
    """Speech detection on one stream's audio clock."""

    voiced_ms: int = 0
    silence_ms: int = 0
    in_speech: bool = False
    words_shown: int = 0
    since_interim_ms: int = 0
    window_start_ms: int = 0


@dataclass
class FakeDeepgram:
    """The fake vendor. `start()` serves on a free port; `url` is then the base URL."""

    api_key: str = "dg-test-key"
    port: int = 0  # chosen by the OS at start: no window for another process to take it
    chunk_bytes: int = 1600
    chunk_gap_s: float = 0.04
    interim_every_ms: int = 300
    # The vendor's NET-0001: a stream without audio or KeepAlive this long is closed.
    no_audio_timeout_s: float = 10.0
    transcripts: deque[str] = field(default_factory=deque)
    # Per coming handshake: a status to refuse it with, or None to accept it.
    handshake_faults: deque[int | None] = field(default_factory=deque)
    speak_faults: deque[int] = field(default_factory=deque)
    drop_after_bytes: deque[int] = field(default_factory=deque)
    handshakes: int = 0
    listens: list[Listen] = field(default_factory=list)
    speaks: list[Speak] = field(default_factory=list)
    _server: uvicorn.Server | None = None
    _task: asyncio.Task[None] | None = None
    _tts: EspeakTts = field(default_factory=EspeakTts)

    @property
    def url(self) -> str:
        """The base URL an engine is configured with."""
        return f"http://127.0.0.1:{self.port}"

    def prime(self, *texts: str) -> None:
        """Transcripts for the next utterances, in order."""
        self.transcripts.extend(texts)

    async def start(self) -> None:
        """Serve until `stop()`."""
        app = Starlette(routes=[
            WebSocketRoute("/v1/listen", self._listen),
            Route("/v1/speak", self._speak, methods=["POST"]),
        ])
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="warning",
            ws="wsproto", lifespan="off",
        )
        self._server = uvicorn.Server(config)
        self._task = asyncio.create_task(self._server.serve())
        deadline = time.monotonic() + 10
        while not self._server.started:
            if self._task.done() or time.monotonic() > deadline:
                raise AssertionError("the fake Deepgram did not start")
            await asyncio.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop serving."""
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            await asyncio.wait_for(self._task, 10)

    # ------------------------------------------------------------------ errors

    @staticmethod
    def _error(status: int, message: str) -> JSONResponse:
        body = {"err_code": ERROR_CODES.get(status, HTTPStatus(status).phrase),
                "err_msg": message, "request_id": str(uuid.uuid4())}
        return JSONResponse(body, status_code=status)

    def _authorized(self, headers: Any) -> bool:
        return bool(headers.get("authorization") == f"Token {self.api_key}")

    def _listen_refusal(self, params: dict[str, str]) -> JSONResponse | None:
        encoding = params.get("encoding")
        if encoding is not None and encoding not in ENCODINGS:
            return self._error(400, f"unknown encoding {encoding!r}")
        if encoding is not None and not params.get("sample_rate", "").isdigit():
            return self._error(400, "sample_rate is required for raw audio")
        if not params.get("channels", "1").isdigit() or int(params.get("channels", "1")) < 1:
            return self._error(400, "channels must be a positive integer")
        for flag in ("interim_results", "punctuate", "smart_format", "vad_events"):
            if params.get(flag, "false") not in ("true", "false"):
                return self._error(400, f"{flag} must be true or false")
        endpointing = params.get("endpointing", "10")
        if endpointing != "false" and not endpointing.isdigit():
            return self._error(400, "endpointing must be an integer or false")
        if encoding != "mulaw" or params.get("sample_rate") != str(RATE):
            # The vendor would transcribe these; this fake only decodes telephone audio.
            return self._error(400, "this fake decodes encoding=mulaw&sample_rate=8000 only")
        return None

    # ------------------------------------------------------------------ STT

    async def _listen(self, ws: WebSocket) -> None:
        self.handshakes += 1
        params = dict(ws.query_params)
        refusal: Response | None = None
        if not self._authorized(ws.headers):
            refusal = self._error(401, "Invalid credentials.")
        elif (status := self.handshake_faults.popleft() if self.handshake_faults else None):
            refusal = self._error(status, "scripted fault")
        else:
            refusal = self._listen_refusal(params)
        if refusal is not None:
            await ws.send_denial_response(refusal)
            return
        await ws.accept()
        stream = Listen(params=params)
        self.listens.append(stream)
        drop_after = self.drop_after_bytes.popleft() if self.drop_after_bytes else None
        try:
            await self._serve_stream(ws, stream, drop_after)
        except WebSocketDisconnect as exc:
            stream.close_code = exc.code

    async def _serve_stream(self, ws: WebSocket, stream: Listen, drop_after: int | None) -> None:
        segment = _Segment()
        endpointing = stream.params.get("endpointing", "10")
        silence_needed = None if endpointing == "false" else int(endpointing)
        interim = stream.params.get("interim_results") == "true"
        pending = b""
        while True:
            try:
                message = await asyncio.wait_for(ws.receive(), self.no_audio_timeout_s)
            except TimeoutError:
                await self._close(ws, stream, 1011, "NET-0001: no audio received in time")
                return
            if message["type"] == "websocket.disconnect":
                stream.close_code = int(message.get("code", 1006))
                return
            if message.get("bytes") is not None:
                data: bytes = message["bytes"]
                now = time.monotonic()
                stream.first_audio_at = stream.first_audio_at or now
                stream.last_audio_at = now
                stream.audio += data
                if drop_after is not None and len(stream.audio) >= drop_after:
                    await self._close(ws, stream, 1011, "NET-0000: internal error")
                    return
                pending += data
                while len(pending) >= ULAW_FRAME_BYTES:
                    frame, pending = pending[:ULAW_FRAME_BYTES], pending[ULAW_FRAME_BYTES:]
                    await self._on_frame(
                        ws, stream, segment, frame, silence_needed=silence_needed, interim=interim
                    )
                continue
            control = json.loads(message.get("text") or "{}")
            if control.get("type") == "KeepAlive":
                stream.keepalives += 1
            elif control.get("type") == "Finalize":
                await self._result(ws, stream, segment, final=True, from_finalize=True)
            elif control.get("type") == "CloseStream":
                stream.close_stream = True
                if segment.in_speech:
                    await self._result(ws, stream, segment, final=True, speech_final=False)
                await self._send(ws, stream, {
                    "type": "Metadata", "transaction_key": "deprecated",
                    "request_id": stream.request_id,
                    "sha256": hashlib.sha256(stream.audio).hexdigest(),
                    "created": datetime.now(UTC).isoformat(),
                    "duration": len(stream.audio) / RATE, "channels": 1,
                })
                await self._close(ws, stream, 1000, "")
                return

    async def _on_frame(
        self, ws: WebSocket, stream: Listen, segment: _Segment, frame: bytes, *,
        silence_needed: int | None, interim: bool,
    ) -> None:
        if rms(ulaw_to_pcm16(frame)) >= VOICED_RMS:
            segment.in_speech = True
            segment.silence_ms = 0
            segment.voiced_ms += 20
            segment.since_interim_ms += 20
            if interim and segment.since_interim_ms >= self.interim_every_ms:
                segment.since_interim_ms = 0
                await self._result(ws, stream, segment, final=False)
        elif segment.in_speech:
            segment.silence_ms += 20
            if silence_needed is not None and segment.silence_ms >= silence_needed:
                await self._result(ws, stream, segment, final=True, speech_final=True)

    async def _result(
        self, ws: WebSocket, stream: Listen, segment: _Segment, *, final: bool,
        speech_final: bool = False, from_finalize: bool = False,
    ) -> None:
        words = self.transcripts[0].split() if self.transcripts else []
        if final:
            shown = words
            if self.transcripts:
                self.transcripts.popleft()
        else:
            # Interim guesses grow a word at a time and never reach the whole sentence.
            segment.words_shown = min(segment.words_shown + 1, max(len(words) - 1, 0))
            shown = words[: segment.words_shown]
        now_ms = len(stream.audio) * 1000 // RATE
        start_ms = segment.window_start_ms
        span = max(now_ms - start_ms, 1)
        await self._send(ws, stream, {
            "type": "Results",
            "channel_index": [0, 1],
            "duration": span / 1000,
            "start": start_ms / 1000,
            "is_final": final,
            "speech_final": speech_final,
            "from_finalize": from_finalize,
            "channel": {"alternatives": [{
                "transcript": " ".join(shown),
                "confidence": 0.98,
                "words": [
                    {"word": w, "punctuated_word": w, "confidence": 0.98,
                     "start": (start_ms + span * i / len(shown)) / 1000,
                     "end": (start_ms + span * (i + 1) / len(shown)) / 1000}
                    for i, w in enumerate(shown)
                ],
            }]},
            "metadata": {"request_id": stream.request_id,
                         "model_info": {"name": stream.params.get("model", "general"),
                                        "version": "fake", "arch": "fake"},
                         "model_uuid": str(uuid.uuid5(uuid.NAMESPACE_URL, "fake"))},
        })
        if final:
            stream.finals_at.append(time.monotonic())
            segment.in_speech = False
            segment.voiced_ms = segment.silence_ms = segment.words_shown = 0
            segment.since_interim_ms = 0
            segment.window_start_ms = now_ms

    @staticmethod
    async def _send(ws: WebSocket, stream: Listen, message: dict[str, Any]) -> None:
        stream.sent.append(message)
        await ws.send_text(json.dumps(message))

    @staticmethod
    async def _close(ws: WebSocket, stream: Listen, code: int, reason: str) -> None:
        stream.close_code = code
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await ws.close(code, reason)

    # ------------------------------------------------------------------ TTS

    async def _speak(self, request: Request) -> Response:
        received = time.monotonic()
        params = dict(request.query_params)
        if not self._authorized(request.headers):
            return self._error(401, "Invalid credentials.")
        if self.speak_faults:
            return self._error(self.speak_faults.popleft(), "scripted fault")
        try:
            body = json.loads(await request.body())
        except ValueError:
            return self._error(400, "Invalid JSON submitted.")
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str) or not text.strip():
            return self._error(400, "text is required")
        if len(text) > MAX_TTS_CHARS:
            return self._error(413, f"text is longer than {MAX_TTS_CHARS} characters")
        encoding = params.get("encoding", "linear16")
        if encoding not in TTS_ENCODINGS:
            return self._error(400, f"unknown encoding {encoding!r}")
        rate = params.get("sample_rate", "")
        if encoding == "mulaw" and (not rate.isdigit() or int(rate) not in TTS_MULAW_RATES):
            return self._error(400, "mulaw needs sample_rate 8000 or 16000")
        if params.get("container", "wav") not in ("none", "wav"):
            return self._error(400, "container must be none or wav for mulaw")
        if (encoding, rate, params.get("container")) != ("mulaw", str(RATE), "none"):
            return self._error(400, "this fake renders mulaw 8000 Hz container=none only")
        speak = Speak(text=text, params=params, received_at=received)
        self.speaks.append(speak)
        speak.audio = await synthesize(self._tts, text)
        speak.chunks_total = -(-len(speak.audio) // self.chunk_bytes)
        headers = {"dg-request-id": str(uuid.uuid4()), "dg-char-count": str(len(text)),
                   "dg-model-name": params.get("model", "aura-asteria-en")}
        return StreamingResponse(
            self._chunks(speak), media_type="audio/basic", headers=headers
        )

    async def _chunks(self, speak: Speak) -> AsyncIterator[bytes]:
        try:
            for start in range(0, len(speak.audio), self.chunk_bytes):
                if speak.chunks_sent:
                    await asyncio.sleep(self.chunk_gap_s)
                chunk = speak.audio[start : start + self.chunk_bytes]
                speak.first_byte_at = speak.first_byte_at or time.monotonic()
                yield chunk
                speak.chunks_sent += 1
                speak.bytes_sent += len(chunk)
            speak.completed = True
        finally:
            speak.disconnected = not speak.completed


# What the tests ask for by voice: a request the offline recogniser could never spell.
ASK = "give me access to github"


@pytest.fixture
async def fake() -> AsyncIterator[FakeDeepgram]:
    """The fake vendor on a free port (import it into a test module to use it there)."""
    server = FakeDeepgram()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
