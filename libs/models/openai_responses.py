"""OpenAI Responses API adapter over plain HTTP (httpx), streaming.

One `POST {base}/responses` per turn with `stream: true`: the server-sent events give text
deltas (`response.output_text.delta`), finished items (`response.output_item.done`, whose
`function_call` items carry `call_id`, `name` and the JSON `arguments`) and an end
(`response.completed`, or `response.failed` / `error`). Function calls become proposed
calls; the extra functions `cancel_<tool>`, `confirm_operation` and `undo_operation` become
explicit cancels, yes/no answers and undos. A call the application cannot use (bad JSON,
unknown function, unknown operation) is dropped with its reason, never admitted. What the
adapters share (functions, prompt, honesty rules) is in `functions`, the endpoint, acceptance
and failure explanation in `adapter`; retries within the turn's budget in `streaming`.

Environment: `OPENAI_API_KEY` (required), `OPENAI_BASE_URL` (https://api.openai.com/v1),
`OPENAI_MODEL` (gpt-4.1-mini), `OPENAI_TIMEOUT_S` (20, for the whole streamed answer,
retries included, and never past the turn's own deadline), `HOLDLINE_MODEL_MAX_RETRIES` (2).
"""

from __future__ import annotations

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
    ModelError,
    ToolSpec,
    TurnReply,
    TurnRequest,
)
from .phrasing import reply_language
from .streaming import RetryPolicy, sse_events

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
VENDOR = "openai"


def function_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` of a request, in the Responses API's flat function format."""
    return [
        {
            "type": "function",
            "name": fn.name,
            "description": fn.description,
            "parameters": fn.parameters,
            "strict": False,
        }
        for fn in offered_functions(tools)
    ]


def request_body(request: TurnRequest, model: str) -> dict[str, Any]:
    """The JSON body of the `POST /responses` for one turn."""
    lang = reply_language(request)
    items: list[dict[str, Any]] = [{"role": "system", "content": instructions(request, lang)}]
    items += [{"role": m.role, "content": m.text} for m in request.history]
    items.append({"role": "developer", "content": turn_context(request)})
    items.append({"role": "user", "content": request.user_text})
    body: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": False}
    if request.tools:
        body["tools"] = function_tools(request.tools)
        body["tool_choice"] = "auto"
        body["parallel_tool_calls"] = True
    return body


@dataclass(slots=True)
class StreamedResponse:
    """What one streamed response said: its text and its finished function calls."""

    text: str = ""
    # (call_id, name, arguments JSON) in the order the items finished.
    function_calls: list[FunctionCall] = field(default_factory=list)
    status: str = "completed"


def _failure(event: dict[str, Any]) -> str:
    error = event.get("error")
    if not isinstance(error, dict):
        response = event.get("response")
        error = response.get("error") if isinstance(response, dict) else None
    if isinstance(error, dict):
        return f"{error.get('code') or 'error'}: {error.get('message') or 'no message'}"
    if event.get("message"):
        return f"{event.get('code') or 'error'}: {event['message']}"
    return "the response failed"


def _function_call(item: dict[str, Any]) -> FunctionCall:
    arguments = item.get("arguments")
    return (
        str(item.get("call_id") or ""),
        str(item.get("name") or ""),
        arguments if isinstance(arguments, str) else "",
    )


def _message_text(item: dict[str, Any]) -> str:
    """The words of a finished message item: its output text and any refusal."""
    parts = []
    for part in item.get("content") or ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "output_text":
            parts.append(str(part.get("text") or ""))
        elif part.get("type") == "refusal":
            parts.append(str(part.get("refusal") or ""))
    return "".join(parts)


def _output(items: Any) -> tuple[str, list[FunctionCall]]:
    """Text and function calls of a list of output items."""
    text: list[str] = []
    calls: list[FunctionCall] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call":
            calls.append(_function_call(item))
        elif item.get("type") == "message":
            text.append(_message_text(item))
    return "".join(text), calls


async def read_stream(response: httpx.Response) -> StreamedResponse:
    """Fold the Responses event stream into text and function calls.

    Text comes from the deltas (output text and refusals); where none streamed, from the
    finished message items, else from the final response object (some servers send only
    that, and a refusal may appear only there). Calls likewise: finished items, else the
    final response's output.
    """
    result = StreamedResponse()
    deltas: list[str] = []
    finished_items: list[dict[str, Any]] = []
    async for event in sse_events(response, VENDOR):
        kind = event.get("type")
        if kind in {"response.output_text.delta", "response.refusal.delta"}:
            deltas.append(str(event.get("delta") or ""))
        elif kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict):
                finished_items.append(item)
        elif kind in {"response.completed", "response.incomplete"}:
            result.status = "completed" if kind == "response.completed" else "incomplete"
            if kind == "response.incomplete":
                log.warning("openai: response incomplete; using what arrived")
            final = event.get("response")
            final_text, final_calls = _output(
                final.get("output") if isinstance(final, dict) else None
            )
            item_text, item_calls = _output(finished_items)
            result.text = "".join(deltas) or item_text or final_text
            result.function_calls = item_calls or final_calls
            return result
        elif kind in {"response.failed", "error"}:
            raise ModelError(f"openai: {_failure(event)}")
    raise ModelError("openai: the stream ended before response.completed")


class OpenAIResponsesModel(HttpModelAdapter):
    """A conversation model backed by the OpenAI Responses API."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 20.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url=base_url, model=model, api_key=api_key, timeout_s=timeout_s, retry=retry,
            transport=transport,
        )

    @classmethod
    def from_settings(cls, settings: ModelSettings) -> OpenAIResponsesModel:
        """Configured from the `OPENAI_*` settings; `OPENAI_API_KEY` is required."""
        if not settings.openai_api_key:
            raise ValueError("OPENAI_API_KEY is not set; the openai model needs it")
        return cls(
            api_key=settings.openai_api_key,
            model=settings.openai_model or DEFAULT_MODEL,
            base_url=settings.openai_base_url or DEFAULT_BASE_URL,
            timeout_s=settings.openai_timeout_s,
            retry=RetryPolicy(max_retries=settings.max_retries),
        )

    async def _stream(self, body: dict[str, Any], deadline: float | None) -> StreamedResponse:
        return await self._endpoint.stream("/responses", body, read_stream, deadline)

    async def respond(self, request: TurnRequest) -> TurnReply:
        """One streamed model turn → text, proposed calls and explicit requests."""
        streamed = await self._stream(request_body(request, self.model), request.deadline)
        return honest_reply(request, streamed.text, streamed.function_calls, vendor=VENDOR)

    def _failure_body(self, system: str, user: str) -> dict[str, Any]:
        return {
            "model": self.model,
            "input": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "stream": True,
            "store": False,
        }
