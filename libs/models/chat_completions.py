"""Any OpenAI-compatible Chat Completions server (vLLM, Ollama, llama.cpp, Groq, Together,
Azure, OpenRouter), streaming, with function calling.

One `POST {base}/chat/completions` per turn with `stream: true`. The server-sent chunks
carry `choices[0].delta`: `content` (and `refusal`) in pieces, and `tool_calls` whose
`index` identifies a call across chunks — the first piece of a call names its `id` and
function, later pieces append to `function.arguments` — then a `finish_reason` and
`data: [DONE]`. Parallel calls interleave by index. Servers differ at the edges, and the
reader takes what they send: a call given whole in one chunk (Ollama), arguments sent as
an object rather than a JSON string, a call without an `index` (a new `id` starts one).

The honesty rules are the Responses adapter's (`functions.honest_reply`): a call the
application cannot use (malformed JSON, unknown function) is dropped with its reason, a
reply with only dropped calls apologises, and a stream that ends before its finish is an
error, so nothing of a cut answer is admitted. An answer cut by the length limit keeps its
words but none of its calls (the list may be incomplete). The turn's context goes into the
one leading system message: many chat templates accept a system message only there.

Environment: `HOLDLINE_MODEL_BASE_URL` (required, e.g. http://127.0.0.1:11434/v1),
`HOLDLINE_MODEL_NAME` (required), `HOLDLINE_MODEL_API_KEY` (sent as a bearer token when
set), `HOLDLINE_MODEL_TIMEOUT_S` (8: the whole answer, retries included),
`HOLDLINE_MODEL_MAX_RETRIES` (2).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from libs.config import ModelSettings

from .adapter import HttpModelAdapter
from .functions import (
    FunctionCall,
    honest_reply,
    instructions,
    offered_functions,
    turn_context,
)
from .interface import (
    ChatMessage,
    ModelError,
    ToolSpec,
    TurnReply,
    TurnRequest,
)
from .phrasing import reply_language
from .streaming import DONE, RetryPolicy, sse_events

log = logging.getLogger(__name__)

VENDOR = "chat-completions"


def chat_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` of a request, in the Chat Completions nested function format."""
    return [
        {
            "type": "function",
            "function": {
                "name": fn.name,
                "description": fn.description,
                "parameters": fn.parameters,
            },
        }
        for fn in offered_functions(tools)
    ]


def _history(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    # Consecutive messages of one role are merged: strict templates require alternation.
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message.role:
            out[-1]["content"] += "\n\n" + message.text
        else:
            out.append({"role": message.role, "content": message.text})
    return out


def request_body(request: TurnRequest, model: str) -> dict[str, Any]:
    """The JSON body of the `POST /chat/completions` for one turn."""
    lang = reply_language(request)
    system = instructions(request, lang) + "\n\n" + turn_context(request)
    messages = [
        {"role": "system", "content": system},
        *_history([*request.history, ChatMessage("user", request.user_text)]),
    ]
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": True}
    if request.tools:
        body["tools"] = chat_tools(request.tools)
        body["parallel_tool_calls"] = True
    return body


@dataclass(slots=True)
class _Call:
    """One tool call being assembled from its pieces."""

    call_id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass(slots=True)
class StreamedChat:
    """What one streamed completion said."""

    text: str = ""
    function_calls: list[FunctionCall] = field(default_factory=list)
    finish_reason: str = ""
    # Calls refused as a whole (an answer cut at the length limit), with the reason.
    dropped: list[str] = field(default_factory=list)


def _error(event: dict[str, Any]) -> str | None:
    """The error an event reports, if it is one (servers put errors inside the stream)."""
    error = event.get("error")
    if isinstance(error, dict):
        return f"{error.get('code') or error.get('type') or 'error'}: {error.get('message')}"
    if isinstance(error, str):
        return error
    if event.get("object") == "error":
        return f"{event.get('code') or event.get('type') or 'error'}: {event.get('message')}"
    return None


class _Assembler:
    """Tool-call pieces → whole calls, in the order each call first appeared."""

    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self._by_index: dict[int, _Call] = {}

    def _slot(self, piece: dict[str, Any]) -> _Call:
        index = piece.get("index")
        if isinstance(index, int):
            if index not in self._by_index:
                self._by_index[index] = _Call()
                self.calls.append(self._by_index[index])
            return self._by_index[index]
        # No index: a new id starts a call, anything else continues the last one.
        new_id = piece.get("id")
        if not self.calls or (new_id and new_id != self.calls[-1].call_id):
            self.calls.append(_Call())
        return self.calls[-1]

    def add(self, piece: Any) -> None:
        if not isinstance(piece, dict):
            return
        call = self._slot(piece)
        if isinstance(piece.get("id"), str) and piece["id"] and not call.call_id:
            call.call_id = piece["id"]
        function = piece.get("function")
        if not isinstance(function, dict):
            return
        if isinstance(function.get("name"), str) and function["name"] and not call.name:
            call.name = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            call.arguments.append(arguments)
        elif isinstance(arguments, dict):
            call.arguments.append(json.dumps(arguments))

    def finished(self) -> list[FunctionCall]:
        return [(c.call_id, c.name, "".join(c.arguments)) for c in self.calls]


async def read_chunks(response: httpx.Response) -> StreamedChat:
    """Fold the chunk stream into text and whole tool calls; ModelError if it was cut."""
    result = StreamedChat()
    text: list[str] = []
    assembler = _Assembler()
    done = False
    async for event in sse_events(response, VENDOR):
        if event is DONE:
            done = True
            break
        failure = _error(event)
        if failure is not None:
            raise ModelError(f"{VENDOR}: {failure}")
        for choice in event.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # only the first choice is ever asked for
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text.extend(
                    delta[key] for key in ("content", "refusal") if isinstance(delta.get(key), str)
                )
                for piece in delta.get("tool_calls") or ():
                    assembler.add(piece)
            if isinstance(choice.get("finish_reason"), str):
                result.finish_reason = choice["finish_reason"]
    if not done and not result.finish_reason:
        raise ModelError(f"{VENDOR}: the stream ended before the answer finished")
    result.text = "".join(text)
    calls = assembler.finished()
    if result.finish_reason == "length" and calls:
        result.dropped = [f"{name or '?'}: the answer was cut at the length limit"
                          for _, name, _ in calls]
        log.warning("%s: answer cut at the length limit; its %d calls dropped",
                    VENDOR, len(calls))
    else:
        result.function_calls = calls
    return result


class ChatCompletionsModel(HttpModelAdapter):
    """A conversation model behind any OpenAI-compatible Chat Completions endpoint."""

    name = VENDOR

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout_s: float = 8.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s, retry=retry,
            transport=transport,
        )

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> ChatCompletionsModel:
        """Configured from the `HOLDLINE_MODEL_*` settings; base URL and model name are required."""
        base_url, name = settings.base_url, settings.model_name
        if not base_url or not name:
            raise ValueError(
                "HOLDLINE_MODEL=chat-completions needs HOLDLINE_MODEL_BASE_URL (e.g. "
                "http://127.0.0.1:11434/v1) and HOLDLINE_MODEL_NAME"
            )
        return cls(
            base_url=base_url,
            model=name,
            api_key=settings.api_key,
            timeout_s=settings.timeout_s,
            retry=RetryPolicy(max_retries=settings.max_retries),
        )

    async def _stream(self, body: dict[str, Any], deadline: float | None) -> StreamedChat:
        return await self._endpoint.stream("/chat/completions", body, read_chunks, deadline)

    async def respond(self, request: TurnRequest) -> TurnReply:
        """One streamed completion → text, proposed calls and explicit requests."""
        streamed = await self._stream(request_body(request, self.model), request.deadline)
        return honest_reply(
            request, streamed.text, streamed.function_calls, vendor=VENDOR,
            dropped=streamed.dropped,
        )

    def _failure_body(self, system: str, user: str) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "stream": True,
        }
