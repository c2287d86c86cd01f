"""Models by name. `HOLDLINE_MODEL` picks one; `mock` needs no credentials."""

from __future__ import annotations

from collections.abc import Callable

from libs.config import env_str

from .interface import SummaryModel
from .mock import MockModel


class UnknownModel(LookupError):
    """No model is registered under that name."""


_FACTORIES: dict[str, Callable[[], SummaryModel]] = {"mock": MockModel}


def register(name: str, factory: Callable[[], SummaryModel]) -> None:
    """Make a model available by name (a provider adapter registers itself here)."""
    _FACTORIES[name] = factory


def get_model(name: str) -> SummaryModel:
    """A new instance of the named model."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join(sorted(_FACTORIES))
        raise UnknownModel(f"unknown model {name!r}; registered: {known}") from None
    return factory()


def model_from_env() -> SummaryModel:
    """The model named by `HOLDLINE_MODEL` (default `mock`)."""
    return get_model(env_str("HOLDLINE_MODEL", "mock"))
