"""A local OpenAI-compatible Chat Completions server, as vLLM and Ollama serve it.

A real HTTP/1.1 server on 127.0.0.1: `POST /v1/chat/completions` with `stream: true`
answers `text/event-stream` in chunked transfer encoding, one `data: {chunk}` per event
and `data: [DONE]` at the end (written from the public API reference). Two flavours of
streamed tool calls: `vllm` sends a call's id and name first, then its arguments in
pieces, finishing with `tool_calls` (and vLLM's own `stop_reason` key); `ollama` sends
each call whole in one chunk and finishes with `stop`. Errors come as the JSON bodies
those servers send. A script can also cut the stream (the connection closes without the
final chunk), drop the connection or queue several answers; every chunk the builders
make is checked against the official SDK's `ChatCompletionChunk`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from .fake_server import FakeServer, ScriptedHandler
from .sdk_shapes import chat_chunk

Chunk = dict[str, Any]
Flavour = Literal["vllm", "ollama"]
# Keys a vendor adds to the OpenAI chunk: tolerated by the shape check, named here.
VENDOR_KEYS = {"vllm": ("stop_reason",), "ollama": ()}


@dataclass
class Call:
    """A tool call the scripted model makes."""

    name: str
    arguments: str | dict[str, Any]
    call_id: str

    @property
    def raw(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Script:
    """One answer: chunks (then [DONE]), or an HTTP error, a cut or a dropped connection."""

    chunks: list[Chunk] = field(default_factory=list)
    status: int = 200
    error_body: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # Close the connection after this many chunks, without finishing the body.
    cut_after: int | None = None
    drop: bool = False
    done: bool = True


class FakeChatCompletions(FakeServer[Script]):
    """The server, its received requests and the script of its answers."""

    def __init__(self) -> None:
        super().__init__(Script(), _Handler)


class _Handler(ScriptedHandler):
    protocol_version = "HTTP/1.1"
    path_served = "/v1/chat/completions"

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def stream(self, fake: FakeChatCompletions, script: Script) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for sent, chunk in enumerate(script.chunks):
            if script.cut_after is not None and sent >= script.cut_after:
                self.close_connection = True
                return  # no terminating chunk: the body is cut
            self._chunk(f"data: {json.dumps(chunk)}\n\n".encode())
        if script.done:
            self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


# -- chunk builders -------------------------------------------------------------------------


def _chunk(choice: dict[str, Any], flavour: Flavour) -> Chunk:
    full = {"index": 0, "logprobs": None, "finish_reason": None, **choice}
    if flavour == "vllm":
        full.setdefault("stop_reason", None)
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1_750_000_000,
             "model": "test-model", "choices": [full]}
    extras = VENDOR_KEYS[flavour]
    chat_chunk({**chunk, "choices": [{k: v for k, v in full.items() if k not in extras}]})
    return chunk


def _pieces(text: str, count: int) -> list[str]:
    step = max(1, -(-len(text) // count))
    return [text[i : i + step] for i in range(0, len(text), step)] or [""]


def completion(
    text: str = "",
    calls: Sequence[Call] = (),
    *,
    flavour: Flavour = "vllm",
    pieces: int = 3,
    interleave: bool = False,
    finish: str | None = None,
) -> list[Chunk]:
    """A streamed answer: the role, text in pieces, then the tool calls, then the finish."""
    chunks = [_chunk({"delta": {"role": "assistant", "content": ""}}, flavour)]
    chunks += [_chunk({"delta": {"content": piece}}, flavour) for piece in _pieces(text, pieces)
               if text]
    if flavour == "ollama" and calls:
        whole = [{"index": i, "id": c.call_id, "type": "function",
                  "function": {"name": c.name, "arguments": c.raw}} for i, c in enumerate(calls)]
        chunks.append(_chunk({"delta": {"role": "assistant", "tool_calls": whole}}, flavour))
    elif calls:
        heads = [_chunk({"delta": {"tool_calls": [{
            "index": i, "id": c.call_id, "type": "function",
            "function": {"name": c.name, "arguments": ""}}]}}, flavour)
            for i, c in enumerate(calls)]
        bodies = [[_chunk({"delta": {"tool_calls": [{"index": i, "function": {
            "arguments": piece}}]}}, flavour) for piece in _pieces(c.raw, pieces)]
            for i, c in enumerate(calls)]
        if interleave:
            chunks += heads
            for row in range(max(len(b) for b in bodies)):
                chunks += [b[row] for b in bodies if row < len(b)]
        else:
            for head, body in zip(heads, bodies, strict=True):
                chunks += [head, *body]
    reason = finish or ("stop" if flavour == "ollama" or not calls else "tool_calls")
    chunks.append(_chunk({"delta": {}, "finish_reason": reason}, flavour))
    return chunks
