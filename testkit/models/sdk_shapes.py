"""The fakes' wire messages checked against the official `openai` package's types.

Each Responses stream event is validated by the SDK's pydantic model for its `type`, each
Chat Completions chunk by `ChatCompletionChunk`; and since those models accept unknown
keys, a key the SDK does not know anywhere in the message fails the check too. So the
fake servers send real shapes, not what an adapter happens to read.
"""

from __future__ import annotations

from typing import Any, get_args

from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel


def _by_type() -> dict[str, type[BaseModel]]:
    union = get_args(ResponseStreamEvent)[0]
    found: dict[str, type[BaseModel]] = {}
    for member in get_args(union):
        (literal,) = get_args(member.model_fields["type"].annotation)
        found[literal] = member
    return found


_EVENTS = _by_type()


def _extras(value: Any, path: str) -> list[str]:
    if isinstance(value, BaseModel):
        found = [f"{path}.{key}" for key in (value.model_extra or {})]
        for name in type(value).model_fields:
            found += _extras(getattr(value, name), f"{path}.{name}")
        return found
    if isinstance(value, list | tuple):
        return [e for i, item in enumerate(value) for e in _extras(item, f"{path}[{i}]")]
    if isinstance(value, dict):
        return [e for k, item in value.items() for e in _extras(item, f"{path}.{k}")]
    return []


def _strict(model: type[BaseModel], message: dict[str, Any]) -> dict[str, Any]:
    parsed = model.model_validate(message)
    unknown = _extras(parsed, model.__name__)
    assert not unknown, f"keys the SDK does not know: {unknown}"
    return message


def response_event(event: dict[str, Any]) -> dict[str, Any]:
    """The event, once the SDK's model for its type accepts it whole."""
    model = _EVENTS.get(event.get("type", ""))
    assert model is not None, f"no Responses stream event of type {event.get('type')!r}"
    return _strict(model, event)


def chat_chunk(chunk: dict[str, Any]) -> dict[str, Any]:
    """The chunk, once `ChatCompletionChunk` accepts it whole."""
    return _strict(ChatCompletionChunk, chunk)
