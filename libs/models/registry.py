"""Models by name. `HOLDLINE_MODEL` picks one; `mock` needs no credentials.

With `HOLDLINE_MODEL` unset, `OPENAI_API_KEY` selects the OpenAI Responses adapter;
`chat-completions` is any OpenAI-compatible Chat Completions server (`HOLDLINE_MODEL_*`).
"""

from __future__ import annotations

from collections.abc import Callable

from libs.config import env_str

from .chat_completions import ChatCompletionsModel
from .interface import ConversationModel
from .mock import MockModel
from .openai_responses import OpenAIResponsesModel


class UnknownModel(LookupError):
    """No model is registered under that name."""


ModelFactory = Callable[[], ConversationModel]

_FACTORIES: dict[str, ModelFactory] = {
    "mock": MockModel,
    "openai": OpenAIResponsesModel.from_env,
    "chat-completions": ChatCompletionsModel.from_env,
}


def register(name: str, factory: ModelFactory) -> None:
    """Make a model available by name (a provider adapter registers itself here)."""
    _FACTORIES[name] = factory


def get_model(name: str) -> ConversationModel:
    """A new instance of the named model."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(sorted(_FACTORIES))
        raise UnknownModel(f"unknown model {name!r}; registered: {known}") from None
    return factory()


def default_model_name() -> str:
    """`openai` when `OPENAI_API_KEY` is set and `HOLDLINE_MODEL` is not; else `mock`."""
    if not env_str("HOLDLINE_MODEL", "") and env_str("OPENAI_API_KEY", ""):
        return "openai"
    return "mock"


def model_name_from_env() -> str:
    """The name `model_from_env` uses: `HOLDLINE_MODEL`, else `default_model_name()`."""
    return env_str("HOLDLINE_MODEL", default_model_name())


def model_from_env() -> ConversationModel:
    """The model named by `HOLDLINE_MODEL` (default: openai with a key, else mock)."""
    return get_model(model_name_from_env())
