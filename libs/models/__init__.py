"""Language models behind a small interface, chosen by name (`HOLDLINE_MODEL`, default mock)."""

from .interface import Outcome, SummaryModel
from .mock import MockModel
from .registry import UnknownModel, get_model, model_from_env, register

__all__ = [
    "MockModel",
    "Outcome",
    "SummaryModel",
    "UnknownModel",
    "get_model",
    "model_from_env",
    "register",
]
