"""Models by name. `ModelSettings.name` (`HOLDLINE_MODEL`) picks one.

With `HOLDLINE_MODEL` unset, `OPENAI_API_KEY` selects the OpenAI Responses adapter, else
demo mode the demo's `mock` (registered by `demo.models`, imported by path in demo mode),
else none: an empty name is `TemplateModel` (closings from templates, chat turns refused;
see `ModelSettings.from_env`); `chat-completions` is any OpenAI-compatible Chat Completions
server (`HOLDLINE_MODEL_*`). The built-in adapters are built from the settings they are
handed; a model registered with `register` is built without arguments.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from libs.config import ModelSettings

from .chat_completions import ChatCompletionsModel
from .interface import ConversationModel
from .openai_responses import OpenAIResponsesModel
from .template import TemplateModel


class UnknownModel(LookupError):
    """No model is registered under that name."""


ModelFactory = Callable[[], ConversationModel]
ConfiguredFactory = Callable[[ModelSettings], ConversationModel]

_FACTORIES: dict[str, ModelFactory] = {"": TemplateModel, "none": TemplateModel}
_CONFIGURED: dict[str, ConfiguredFactory] = {
    "openai": OpenAIResponsesModel.from_settings,
    "chat-completions": ChatCompletionsModel.from_settings,
}
_DEFAULTS = ModelSettings()


def register(name: str, factory: ModelFactory) -> None:
    """Make a model available by name (a provider adapter registers itself here)."""
    _FACTORIES[name] = factory


def get_model(name: str, settings: ModelSettings = _DEFAULTS) -> ConversationModel:
    """A new instance of the named model (a registered one wins over a built-in adapter)."""
    if name in _FACTORIES:
        return _FACTORIES[name]()
    if name in _CONFIGURED:
        return _CONFIGURED[name](settings)
    known = ", ".join(sorted({*_FACTORIES, *_CONFIGURED} - {""}))
    hint = " (the demo's: HOLDLINE_DEMO=1 or HOLDLINE_MODEL_MODULES=demo.models)"
    raise UnknownModel(
        f"unknown model {name!r}; registered: {known}{hint if name == 'mock' else ''}"
    )


def model_for(settings: ModelSettings, modules: Iterable[str] = ()) -> ConversationModel:
    """The model the settings name (`HOLDLINE_MODEL`), after importing `modules` (they
    register models of their own: `libs.modes.model_modules`)."""
    for module in modules:
        importlib.import_module(module)
    return get_model(settings.name, settings)
