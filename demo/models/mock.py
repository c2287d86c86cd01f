"""A deterministic model for demos and tests: same request in, same reply out.

It reads English and Spanish requests for the demo tools (`mock_reader.py`, with the phrase
patterns of `mock_phrases.py`, the booking readers of `mock_bookings.py` and the small
phrase readers of `understanding*.py`), answers status questions from the live operations
only, and phrases acceptances (`libs.models.phrasing`) and failure explanations
(`libs.models.template`) from templates. It never reads the clock. It is a test double of a
language model, part of the demo, not of the runtime's core (which knows no tool by name).
"""

from __future__ import annotations

from collections.abc import Sequence

from libs.models.interface import AdmissionNote, OperationOutcome, TurnReply, TurnRequest
from libs.models.phrasing import acceptance_message, reply_language
from libs.models.template import explain_from_templates

from .mock_reader import TurnReader
from .understanding_dates import parse_today


class MockModel:
    """Deterministic conversation model: reads requests, phrases acceptances and summaries."""

    name = "mock"

    async def respond(self, request: TurnRequest) -> TurnReply:
        """Propose calls and explicit requests for one turn; same request, same reply."""
        reader = TurnReader(request, reply_language(request), parse_today(request.today))
        return reader.reply()

    async def accept(
        self, request: TurnRequest, reply: TurnReply, notes: Sequence[AdmissionNote]
    ) -> str:
        """The reply's text, then what admission did; never a claim of completion."""
        return acceptance_message(request, reply, notes)

    async def explain_failures(self, outcomes: Sequence[OperationOutcome], *, language: str) -> str:
        """What worked, what did not and why, and what the user can do next (templates)."""
        return explain_from_templates(outcomes, language=language)
