"""Admission: validation, authorisation, limits, duplicates and backpressure, as events."""

from .admission import ELSEWHERE, Admission, Outcome, ToolCall, TurnAdmission, TurnContext
from .intent import digest, intent_key, subject_key
from .load import LoadView

__all__ = [
    "ELSEWHERE",
    "Admission",
    "LoadView",
    "Outcome",
    "ToolCall",
    "TurnAdmission",
    "TurnContext",
    "digest",
    "intent_key",
    "subject_key",
]
