"""A local OpenAI Realtime server for tests: the Realtime protocol over WebSocket on 127.0.0.1,
with a scripted model.

Every client event is validated against the `openai` package's `RealtimeClientEvent` and
every server event against its `RealtimeServerEvent` before it is sent, so the SDK under
test speaks the real protocol to a server that does too. The model is scripted by the test:

- a typed user message (`send_message`) asking for "access to NAME" gets a
  `provision_access` call for NAME;
- `caller_starts()` / `caller_stops(transcript, call=...)`: the server VAD's view of the
  caller (`input_audio_buffer.speech_started/stopped`, the committed user item, its
  transcription) and, on stop, the model's answer: the function call given, else a
  short "Okay.";
- after a `function_call_output`, the model says a line that keeps to the output
  ("Sure, that has started." for an acceptance, "Sorry, I could not do that." otherwise);
- a `response.create` whose instructions end in a "...nothing else:" line says that line's
  text, word for word.

Speech is G.711 μ-law, `MS_PER_WORD` per word, sent in 100 ms deltas at `speed` times real
time (as the real service, faster than it plays). A `speech_started` while a response is
generating cancels it (`interrupt_response`), as the service does.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent
from pydantic import TypeAdapter
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

MS_PER_WORD = 300
CHUNK_MS = 100
_CLIENT = TypeAdapter[Any](RealtimeClientEvent)
_SERVER = TypeAdapter[Any](RealtimeServerEvent)
_SAY_MARKER = "nothing else:"


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


@dataclass
class Received:
    """One client event, as sent, and when (monotonic)."""

    at: float
    event: dict[str, Any]


@dataclass
class Line:
    """One connection from a `RealtimeSession`."""

    ws: ServerConnection
    speed: float
    received: list[Received] = field(default_factory=list)
    invalid: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    said: list[tuple[str, str]] = field(default_factory=list)  # (response_id, text)
    session: dict[str, Any] = field(default_factory=dict)
    _response: asyncio.Task[None] | None = None
    _audio_ms: int = 0
    _last_output: str = ""
    _typed: str = ""
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    # -- the test's side ------------------------------------------------------------------

    async def caller_starts(self) -> None:
        """The server's VAD hears the caller start: a generating response is cancelled."""
        await self._emit({"type": "input_audio_buffer.speech_started",
                          "audio_start_ms": self._audio_ms, "item_id": _id("item")})
        if self._response is not None and not self._response.done():
            self._response.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._response

    async def caller_stops(self, transcript: str, call: tuple[str, str] | None = None) -> None:
        """The caller stopped: their item and its transcript, then the model's answer (the
        call `(name, arguments JSON)` when given)."""
        item_id = _id("item")
        self._audio_ms += 1000
        await self._emit({"type": "input_audio_buffer.speech_stopped",
                          "audio_end_ms": self._audio_ms, "item_id": item_id})
        await self._emit({"type": "input_audio_buffer.committed", "item_id": item_id})
        await self._emit({"type": "conversation.item.added", "item": {
            "id": item_id, "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_audio", "transcript": None}]}})
        await self._emit({
            "type": "conversation.item.input_audio_transcription.completed",
            "item_id": item_id, "content_index": 0, "transcript": transcript,
            "usage": {"type": "duration", "seconds": 1.0},
        })
        if call is not None:
            self._start(self._function_call(*call))
        else:
            self._start(self._speak("Okay.", {}))

    def events(self, kind: str) -> list[Received]:
        """Client events of one type, in order."""
        return [r for r in self.received if r.event.get("type") == kind]

    def outputs(self) -> list[str]:
        """The tool outputs the SDK sent back."""
        return [r.event["item"]["output"] for r in self.events("conversation.item.create")
                if r.event["item"].get("type") == "function_call_output"]

    async def wait(self, check: Any, timeout_s: float = 20.0) -> Any:
        """Until `check()` is truthy (re-checked on every event)."""
        deadline = time.monotonic() + timeout_s
        while not (found := check()):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                kinds = [r.event.get("type") for r in self.received]
                raise AssertionError(f"timed out; received {kinds}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
        return found

    # -- the protocol ---------------------------------------------------------------------

    async def serve(self) -> None:
        await self._emit({"type": "session.created", "session": {
            "type": "realtime", "model": "gpt-realtime", "object": "realtime.session",
            "id": _id("sess")}})
        with contextlib.suppress(ConnectionClosed):
            async for raw in self.ws:
                event = json.loads(raw)
                self.received.append(Received(time.monotonic(), event))
                try:
                    _CLIENT.validate_python(event)
                except Exception as error:  # recorded: the test asserts there is none
                    self.invalid.append((event, str(error)))
                    await self._emit({"type": "error", "error": {
                        "type": "invalid_request_error", "message": str(error)[:200]}})
                else:
                    await self._on_client(event)
                self._changed.set()
        if self._response is not None:
            self._response.cancel()

    async def _on_client(self, event: dict[str, Any]) -> None:
        kind = event["type"]
        if kind == "session.update":
            self.session.update(event["session"])
            await self._emit({"type": "session.updated", "session": self.session})
        elif kind == "conversation.item.create":
            item = {**event["item"], "id": event["item"].get("id") or _id("item")}
            await self._emit({"type": "conversation.item.added", "item": item})
            if item.get("type") == "function_call_output":
                self._last_output = str(item.get("output", ""))
            elif item.get("role") == "user":
                self._typed = " ".join(str(part.get("text", "")) for part in item["content"])
        elif kind == "response.create":
            response = event.get("response") or {}
            instructions = str(response.get("instructions") or "")
            typed, self._typed = self._typed, ""
            if "access to " in typed and not instructions:
                # A typed request: the model calls the tool for the name after "access to".
                name = typed.rsplit("access to ", 1)[1].split()[0].strip(".,")
                self._start(self._function_call(
                    "provision_access", json.dumps({"accesses": [name]})))
                return
            if _SAY_MARKER in instructions:
                text = instructions.rsplit(_SAY_MARKER, 1)[1].strip()
            elif instructions:
                text = "Sorry, I did not get that. Could you say it again?"
            elif self._last_output.startswith("Accepted"):
                text = "Sure, that has started."
            else:
                text = "Sorry, I could not do that."
            self._last_output = ""
            self._start(self._speak(text, dict(response.get("metadata") or {})))
        elif kind == "response.cancel" and self._response is not None:
            self._response.cancel()
        elif kind == "conversation.item.truncate":
            await self._emit({"type": "conversation.item.truncated", "item_id": event["item_id"],
                              "content_index": event["content_index"],
                              "audio_end_ms": event["audio_end_ms"]})

    def _start(self, body: Any) -> None:
        self._response = asyncio.get_running_loop().create_task(body)

    async def _function_call(self, name: str, arguments: str) -> None:
        response_id, item_id, call_id = _id("resp"), _id("item"), _id("call")
        await self._emit({"type": "response.created", "response": {
            "id": response_id, "object": "realtime.response", "status": "in_progress",
            "output": []}})
        item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name,
                "arguments": arguments, "status": "completed"}
        await self._emit({"type": "response.output_item.added", "response_id": response_id,
                          "output_index": 0, "item": {**item, "status": "in_progress",
                                                      "arguments": ""}})
        await self._emit({"type": "response.function_call_arguments.done",
                          "response_id": response_id, "item_id": item_id, "output_index": 0,
                          "call_id": call_id, "name": name, "arguments": arguments})
        await self._emit({"type": "response.output_item.done", "response_id": response_id,
                          "output_index": 0, "item": item})
        await self._emit({"type": "response.done", "response": {
            "id": response_id, "object": "realtime.response", "status": "completed",
            "output": [item]}})

    async def _speak(self, text: str, metadata: dict[str, str]) -> None:
        response_id, item_id = _id("resp"), _id("item")
        head = {"response_id": response_id, "item_id": item_id, "output_index": 0,
                "content_index": 0}
        await self._emit({"type": "response.created", "response": {
            "id": response_id, "object": "realtime.response", "status": "in_progress",
            "output": [], "metadata": metadata or None}})
        message = {"id": item_id, "type": "message", "role": "assistant",
                   "status": "in_progress", "content": []}
        await self._emit({"type": "response.output_item.added", "response_id": response_id,
                          "output_index": 0, "item": message})
        status = "completed"
        try:
            words = text.split()
            total_ms = max(1, len(words)) * MS_PER_WORD
            sent = 0
            while sent < total_ms:
                # One word of transcript per word of audio, as the model streams both.
                word_index = sent // MS_PER_WORD
                if sent % MS_PER_WORD == 0 and word_index < len(words):
                    delta = words[word_index] + ("" if word_index == len(words) - 1 else " ")
                    await self._emit({"type": "response.output_audio_transcript.delta",
                                      **head, "delta": delta})
                chunk = bytes([0x7F]) * (CHUNK_MS * 8)
                await self._emit({"type": "response.output_audio.delta", **head,
                                  "delta": base64.b64encode(chunk).decode()})
                sent += CHUNK_MS
                await asyncio.sleep(CHUNK_MS / 1000 / self.speed)
        except asyncio.CancelledError:
            status = "cancelled"
        if status == "completed":
            await self._emit({"type": "response.output_audio.done", **head})
            await self._emit({"type": "response.output_audio_transcript.done", **head,
                              "transcript": text})
            self.said.append((response_id, text))
        done = {**message, "status": "completed" if status == "completed" else "incomplete",
                "content": [{"type": "output_audio", "transcript": text}]}
        await self._emit({"type": "response.output_item.done", "response_id": response_id,
                          "output_index": 0, "item": done})
        await self._emit({"type": "response.done", "response": {
            "id": response_id, "object": "realtime.response", "status": status,
            "output": [done], "metadata": metadata or None}})

    async def _emit(self, event: dict[str, Any]) -> None:
        event = {"event_id": _id("event"), **event}
        _SERVER.validate_python(event)
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send(json.dumps(event))


@dataclass
class RealtimeModelServer:
    """`async with RealtimeModelServer() as server`: listening on 127.0.0.1; `server.url` is
    what the SDK's model config `url` takes; `await server.line(n)` is the nth connection."""

    speed: float = 4.0
    # 0: any free port; a fixed one lets a long-lived agent process reach each test's server.
    port: int = 0
    lines: list[Line] = field(default_factory=list)
    _server: Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        assert self._server is not None
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime"

    async def __aenter__(self) -> RealtimeModelServer:
        self._server = await serve(self._handle, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5)

    async def _handle(self, ws: ServerConnection) -> None:
        line = Line(ws, self.speed)
        self.lines.append(line)
        self._changed.set()
        await line.serve()

    async def line(self, index: int, timeout_s: float = 20.0) -> Line:
        """The `index`th connection (0-based), once it came."""
        deadline = time.monotonic() + timeout_s
        while len(self.lines) <= index:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no connection {index}; {len(self.lines)} came")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
        return self.lines[index]
