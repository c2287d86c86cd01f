"""A local fake of the OpenAI Responses API: a real HTTP server on 127.0.0.1 speaking SSE.

Each test scripts what the next `POST /v1/responses` answers (events, an HTTP error with
headers, a dropped connection or a hang; `queue` for several requests in a row) and reads
back the JSON bodies the server received and when. The event builders' output is checked
against the official SDK's types (`sdk_shapes`).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

from .fake_server import FakeServer, ScriptedHandler
from .sdk_shapes import response_event

Event = dict[str, Any]


@dataclass
class Script:
    """What the server answers: SSE events, or an HTTP status with a body, or a hang."""

    events: list[Event] = field(default_factory=list)
    status: int = 200
    error_body: str = ""
    hang: bool = False
    headers: dict[str, str] = field(default_factory=dict)
    # Close the connection without answering (a connection error for the client).
    drop: bool = False


class FakeResponses(FakeServer[Script]):
    """The server, its received requests and the script of its answers."""

    def __init__(self) -> None:
        super().__init__(Script(), _Handler)
        self.release = threading.Event()

    def stop(self) -> None:
        self.release.set()
        super().stop()


class _Handler(ScriptedHandler):
    # HTTP/1.0: the streamed body ends when the connection closes, like a proxy would do.
    protocol_version = "HTTP/1.0"

    def stream(self, fake: FakeResponses, script: Script) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for event in script.events:
            self.wfile.write(sse(event))
            self.wfile.flush()
        if script.hang:
            fake.release.wait(timeout=10)


def sse(event: Event) -> bytes:
    """One server-sent event as the Responses API writes it."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


# -- event builders ------------------------------------------------------------------------


def _numbered(events: list[Event]) -> list[Event]:
    return [response_event({**e, "sequence_number": i}) for i, e in enumerate(events)]


def response_object(status: str, output: list[Event] | None = None, **extra: Any) -> Event:
    """A Response object as the API returns it (the fields the SDK requires)."""
    return {
        "id": "resp_1", "object": "response", "created_at": 1_750_000_000, "model": "gpt-test",
        "status": status, "output": output or [], "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], **extra,
    }


def response_stream(*outputs: list[Event], status: str = "completed") -> list[Event]:
    """created, in_progress, the outputs' events, then completed (or another end)."""
    resp = response_object("in_progress")
    events: list[Event] = [
        {"type": "response.created", "response": resp},
        {"type": "response.in_progress", "response": resp},
    ]
    done: list[Event] = []
    for output in outputs:
        events += output
        done += [e["item"] for e in output if e["type"] == "response.output_item.done"]
    if status:
        events.append({"type": f"response.{status}", "response": response_object(status, done)})
    return _numbered(events)


def event(kind: str, **fields: Any) -> Event:
    """One event outside a stream builder, checked like the rest."""
    return response_event({"type": kind, "sequence_number": 0, **fields})


def message(text: str, index: int = 0, pieces: int = 3) -> list[Event]:
    """An assistant message streamed as text deltas."""
    item_id = f"msg_{index}"
    step = max(1, len(text) // pieces)
    chunks = [text[i : i + step] for i in range(0, len(text), step)]
    events: list[Event] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {"id": item_id, "type": "message", "role": "assistant", "content": [],
                     "status": "in_progress"},
        },
    ]
    events += [
        {
            "type": "response.output_text.delta",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "delta": chunk,
            "logprobs": [],
        }
        for chunk in chunks
    ]
    done_item = {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    events += [
        {
            "type": "response.output_text.done",
            "item_id": item_id,
            "output_index": index,
            "content_index": 0,
            "text": text,
            "logprobs": [],
        },
        {"type": "response.output_item.done", "output_index": index, "item": done_item},
    ]
    return events


def function_call(
    name: str, arguments: str | dict[str, Any], call_id: str, index: int
) -> list[Event]:
    """A function call item streamed as argument deltas, then done."""
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    item_id = f"fc_{index}"
    item = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name}
    half = len(raw) // 2
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": index,
            "delta": raw[:half],
        },
        {
            "type": "response.function_call_arguments.delta",
            "item_id": item_id,
            "output_index": index,
            "delta": raw[half:],
        },
        {
            "type": "response.function_call_arguments.done",
            "item_id": item_id,
            "output_index": index,
            "arguments": raw,
        },
        {
            "type": "response.output_item.done",
            "output_index": index,
            "item": {**item, "arguments": raw, "status": "completed"},
        },
    ]
