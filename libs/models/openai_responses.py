"""OpenAI Responses API adapter over plain HTTP (httpx), streaming.

One `POST {base}/responses` per turn with `stream: true`: the server-sent events give text
deltas (`response.output_text.delta`), finished items (`response.output_item.done`, whose
`function_call` items carry `call_id`, `name` and the JSON `arguments`) and an end
(`response.completed`, or `response.failed` / `error`). Function calls become proposed
calls; the extra functions `cancel_<tool>`, `confirm_operation` and `undo_operation` become
explicit cancels, yes/no answers and undos. A call the application cannot use (bad JSON,
unknown function, unknown operation) is dropped with its reason, never admitted.

Environment: `OPENAI_API_KEY` (required), `OPENAI_BASE_URL` (https://api.openai.com/v1),
`OPENAI_MODEL` (gpt-4.1-mini), `OPENAI_TIMEOUT_S` (20, for the whole streamed answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from libs.config import env_float, env_str

from .interface import (
    AdmissionNote,
    LiveOperation,
    ModelError,
    Outcome,
    ProposedCall,
    ToolSpec,
    TurnReply,
    TurnRequest,
    call_id,
)
from .phrasing import (
    Lang,
    acceptance_message,
    base_language,
    join_text,
    pending_preamble,
    reply_language,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4.1-mini"
CONFIRM = "confirm_operation"
UNDO = "undo_operation"
CANCEL_PREFIX = "cancel_"
_LANGUAGE_NAMES = {"es": "Spanish", "en": "English"}
_MAX_ERROR_BODY = 2000


def _operation_parameters(*, with_answer: bool = False) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "operation_id": {"type": "string", "description": "The id from the operations list."}
    }
    required = ["operation_id"]
    if with_answer:
        properties["yes"] = {"type": "boolean", "description": "true to go ahead, false to not."}
        required.append("yes")
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }


def function_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """The `tools` of a request: each tool, `cancel_<tool>` when cancellable, and the
    confirmation and undo functions."""
    out: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": spec.parameters,
            "strict": False,
        }
        for spec in tools
    ]
    out += [
        {
            "type": "function",
            "name": f"{CANCEL_PREFIX}{spec.name}",
            "description": (
                f"Cancel a {spec.name} operation that has not finished. Only when the user "
                "explicitly asks to cancel it."
            ),
            "parameters": _operation_parameters(),
            "strict": False,
        }
        for spec in tools
        if spec.cancellable
    ]
    out.append(
        {
            "type": "function",
            "name": CONFIRM,
            "description": "The user's yes or no to an operation awaiting confirmation.",
            "parameters": _operation_parameters(with_answer=True),
            "strict": False,
        }
    )
    out.append(
        {
            "type": "function",
            "name": UNDO,
            "description": (
                "Undo an operation that already went through (runs its compensation). Only "
                "when the user explicitly asks to undo or revert it."
            ),
            "parameters": _operation_parameters(),
            "strict": False,
        }
    )
    return out


def _instructions(request: TurnRequest, lang: Lang) -> str:
    language = _LANGUAGE_NAMES.get(lang, lang)
    return (
        f"You are {request.agent}, an assistant whose tools have real side effects. "
        "Call tools to act; several independent actions can be called in parallel. "
        "Tools run in the background: never say an action is done, booked, sent or granted "
        "unless the operations list shows it as committed. "
        "Put several accesses in one provision_access call. To change a booking, call "
        "book_table again with the same restaurant and date and the new details. "
        "Cancel (cancel_<tool>) only when the user explicitly asks; 'wait' or a pause is "
        "never a cancellation. Use confirm_operation for a yes or no to an operation "
        "awaiting confirmation, and undo_operation to reverse one that was committed. "
        f"Answer briefly, in {language}."
    )


def turn_context(request: TurnRequest) -> str:
    """The developer message of one turn: live operations and pending updates, never stored."""
    lines = ["Context for this turn only; it is not part of the conversation."]
    if request.today:
        lines.append(f"Today is {request.today}.")
    if request.live_operations:
        lines.append("Operations in this session (id · tool · status · what · arguments):")
        for op in request.live_operations:
            args = json.dumps(op.arguments, sort_keys=True, ensure_ascii=False)
            line = f"- {op.operation_id} · {op.tool} · {op.status} · {op.label} · {args}"
            if op.prompt:
                line += f" · asks: {op.prompt}"
            lines.append(line)
    else:
        lines.append("No operations are in progress in this session.")
    if request.pending_updates:
        lines.append(
            "The user has just been told these earlier results, right before your answer; "
            "do not repeat them:"
        )
        lines.extend(f"- {update.text}" for update in request.pending_updates)
    return "\n".join(lines)


def request_body(request: TurnRequest, model: str) -> dict[str, Any]:
    """The JSON body of the `POST /responses` for one turn."""
    lang = reply_language(request)
    items: list[dict[str, Any]] = [{"role": "system", "content": _instructions(request, lang)}]
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
    function_calls: list[tuple[str, str, str]] = field(default_factory=list)
    status: str = "completed"


async def _events(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
            continue
        if line or not data:
            continue  # `event:`, `id:`, comments, or a blank line with nothing pending
        payload = "\n".join(data)
        data = []
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise ModelError(f"openai: unreadable stream event: {payload[:200]!r}") from exc
        if isinstance(event, dict):
            yield event


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


def _function_call(item: dict[str, Any]) -> tuple[str, str, str]:
    arguments = item.get("arguments")
    return (
        str(item.get("call_id") or ""),
        str(item.get("name") or ""),
        arguments if isinstance(arguments, str) else "",
    )


def _completed_output(result: StreamedResponse, response: Any, *, calls: bool) -> None:
    # Some servers only send the final response: read its output where nothing streamed.
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return
    text = not result.text
    for item in response["output"]:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call" and calls:
            result.function_calls.append(_function_call(item))
        elif item.get("type") == "message" and text:
            for part in item.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "output_text":
                    result.text += str(part.get("text") or "")


async def read_stream(response: httpx.Response) -> StreamedResponse:
    """Fold the Responses event stream into text and function calls."""
    result = StreamedResponse()
    deltas: list[str] = []
    calls_seen = False
    async for event in _events(response):
        kind = event.get("type")
        if kind in {"response.output_text.delta", "response.refusal.delta"}:
            deltas.append(str(event.get("delta") or ""))
        elif kind == "response.output_item.done":
            item = event.get("item")
            if isinstance(item, dict) and item.get("type") == "function_call":
                calls_seen = True
                result.function_calls.append(_function_call(item))
        elif kind in {"response.completed", "response.incomplete"}:
            result.text = "".join(deltas)
            result.status = "completed" if kind == "response.completed" else "incomplete"
            if kind == "response.incomplete":
                log.warning("openai: response incomplete; using what arrived")
            _completed_output(result, event.get("response"), calls=not calls_seen)
            return result
        elif kind in {"response.failed", "error"}:
            raise ModelError(f"openai: {_failure(event)}")
    raise ModelError("openai: the stream ended before response.completed")


@dataclass(slots=True)
class _Mapped:
    calls: list[ProposedCall] = field(default_factory=list)
    cancels: list[str] = field(default_factory=list)
    confirmations: list[tuple[str, bool]] = field(default_factory=list)
    compensations: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)


def map_calls(request: TurnRequest, raw: Sequence[tuple[str, str, str]]) -> _Mapped:
    """Function calls → proposed calls and explicit requests; the rest dropped with a reason."""
    offered = {spec.name: spec for spec in request.tools}
    live: dict[str, LiveOperation] = {op.operation_id: op for op in request.live_operations}
    out = _Mapped()

    def drop(reason: str) -> None:
        log.warning("openai: dropped a tool call: %s", reason)
        out.dropped.append(reason)

    for index, (provider_id, name, arguments) in enumerate(raw):
        try:
            args = json.loads(arguments) if arguments else {}
        except json.JSONDecodeError as exc:
            drop(f"{name or '?'}: arguments are not valid JSON ({exc.msg})")
            continue
        if not isinstance(args, dict):
            drop(f"{name or '?'}: arguments are not a JSON object")
            continue
        if name in offered:
            out.calls.append(
                ProposedCall(name, args, provider_id or call_id(request.turn_id, index))
            )
            continue
        target = name.removeprefix(CANCEL_PREFIX)
        is_cancel = (
            name.startswith(CANCEL_PREFIX) and target in offered and offered[target].cancellable
        )
        if not (is_cancel or name in {CONFIRM, UNDO}):
            drop(f"{name or '?'}: unknown function")
            continue
        op_id = args.get("operation_id")
        op = live.get(op_id) if isinstance(op_id, str) else None
        if op is None:
            drop(f"{name}: unknown operation {op_id!r}")
        elif is_cancel and op.tool != target:
            drop(f"{name}: operation {op_id} is a {op.tool}, not a {target}")
        elif is_cancel:
            out.cancels.append(op.operation_id)
        elif name == CONFIRM:
            yes = args.get("yes")
            if isinstance(yes, bool):
                out.confirmations.append((op.operation_id, yes))
            else:
                drop(f"{name}: 'yes' must be true or false")
        else:
            out.compensations.append(op.operation_id)
    return out


class OpenAIResponsesModel:
    """A conversation model backed by the OpenAI Responses API."""

    name = "openai"

    def __init__(
        self,
        *,
        api_key: str,
        model: str = DEFAULT_MODEL,
        base_url: str = DEFAULT_BASE_URL,
        timeout_s: float = 20.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._api_key = api_key
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    @classmethod
    def from_env(cls) -> OpenAIResponsesModel:
        """Configured from `OPENAI_*` variables; `OPENAI_API_KEY` is required."""
        key = env_str("OPENAI_API_KEY", "")
        if not key:
            raise ValueError("OPENAI_API_KEY is not set; the openai model needs it")
        return cls(
            api_key=key,
            model=env_str("OPENAI_MODEL", DEFAULT_MODEL),
            base_url=env_str("OPENAI_BASE_URL", DEFAULT_BASE_URL),
            timeout_s=env_float("OPENAI_TIMEOUT_S", 20.0),
        )

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                transport=self._transport,
                headers={"Authorization": f"Bearer {self._api_key}"},
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _stream(self, body: dict[str, Any]) -> StreamedResponse:
        url = f"{self.base_url}/responses"
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self._http().stream(
                    "POST", url, json=body, headers={"Accept": "text/event-stream"}
                ) as response:
                    if response.status_code >= 400:
                        detail = (await response.aread())[:_MAX_ERROR_BODY].decode(
                            "utf-8", "replace"
                        )
                        raise ModelError(f"openai: HTTP {response.status_code}: {detail}")
                    return await read_stream(response)
        except TimeoutError as exc:
            raise ModelError(f"openai: no complete answer within {self.timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise ModelError(f"openai: {type(exc).__name__}: {exc}") from exc

    async def respond(self, request: TurnRequest) -> TurnReply:
        """One streamed model turn → text, proposed calls and explicit requests."""
        streamed = await self._stream(request_body(request, self.model))
        mapped = map_calls(request, streamed.function_calls)
        lang = reply_language(request)
        preamble = pending_preamble(request.pending_updates, lang)
        requests = mapped.calls or mapped.cancels or mapped.confirmations or mapped.compensations
        if requests:
            # The acceptance speaks for the requests; the model's own words could claim them.
            text = preamble
        elif streamed.text.strip():
            text = join_text([preamble, streamed.text])
        elif mapped.dropped:
            text = join_text(
                [
                    preamble,
                    "Perdona, no he podido entenderlo bien. ¿Me lo dices de otra forma?"
                    if lang == "es"
                    else "Sorry, I couldn't act on that. Could you say it another way?",
                ]
            )
        else:
            raise ModelError("openai: the response had neither text nor tool calls")
        return TurnReply(
            text=text,
            calls=tuple(mapped.calls),
            cancels=tuple(dict.fromkeys(mapped.cancels)),
            confirmations=tuple(dict.fromkeys(mapped.confirmations)),
            compensations=tuple(dict.fromkeys(mapped.compensations)),
            attached=tuple(update.delivery_id for update in request.pending_updates),
            dropped=tuple(mapped.dropped),
        )

    async def accept(
        self, request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
    ) -> str:
        """Template acceptance in the turn's language: deterministic, never a claim."""
        return acceptance_message(request, reply, notes)

    async def explain_failures(self, outcomes: Sequence[Outcome], *, language: str) -> str:
        """A short closing with what worked, what failed and why, and an alternative."""
        lang = base_language(language)
        listed = [
            {"what": o.label, "tool": o.tool, "status": o.status, "detail": o.detail}
            for o in outcomes
        ]
        body = {
            "model": self.model,
            "input": [
                {
                    "role": "system",
                    "content": (
                        "Write one short message to the user about these operations: what "
                        "worked, what failed and why, and one concrete alternative they can "
                        "take. Only a status of 'committed' means it worked. Answer in "
                        f"{_LANGUAGE_NAMES.get(lang, lang)}, with no preamble."
                    ),
                },
                {"role": "user", "content": json.dumps(listed, ensure_ascii=False)},
            ],
            "stream": True,
            "store": False,
        }
        text = (await self._stream(body)).text.strip()
        if not text:
            raise ModelError("openai: empty failure explanation")
        return text
