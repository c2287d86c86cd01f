"""What the runtime asks of a model. Kept to the calls it really makes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Outcome:
    """The terminal result of one operation, as a summary needs it."""

    operation_id: str
    tool: str
    # What the operation was about, in the user's words where possible ("alpha", "R on D").
    label: str
    status: str
    detail: str = ""


class SummaryModel(Protocol):
    """A model that turns a batch's outcomes into words for the user."""

    name: str

    async def explain_failures(self, outcomes: Sequence[Outcome], *, language: str) -> str:
        """One short message: what worked, what failed and why, and a concrete alternative."""
        ...
