"""Admission: validation, authorisation, limits, duplicates and backpressure, as events."""

from .admission import Admission
from .intent import digest, intent_key, subject_key
from .load import LoadView
from .plan_types import ELSEWHERE, AdmissionOutcome, ToolCall, TurnAdmission, TurnContext

__all__ = [
    "ELSEWHERE",
    "Admission",
    "AdmissionOutcome",
    "LoadView",
    "ToolCall",
    "TurnAdmission",
    "TurnContext",
    "digest",
    "intent_key",
    "subject_key",
]
