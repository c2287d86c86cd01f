"""A request heard with doubt (`Doubt`), waiting for the caller's yes or no.

Before admission, a voice turn's proposed calls are reviewed: calls built on doubtful
words (`floor.doubtful_values`) are held and the caller is asked "did you say ...?"
(`floor.question`); the answer, spoken or keyed, runs the request as heard or says that
nothing was done (`turn_taking.answer_doubt`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import turn_taking as tt
from .engines.base import SpeechToText, known_values
from .floor import FloorConfig, Word, doubtful_values, question
from .ports import Review


class Doubt:
    """One call's held request, if any, and how many were answered."""

    def __init__(self, connection_id: str, stt: SpeechToText | None, floor: FloorConfig) -> None:
        self._connection_id = connection_id
        self._stt = stt
        self._floor = floor
        self._held: str | None = None
        self._answered = 0

    def pending(self) -> bool:
        """A question waits for the caller's yes or no."""
        return self._held is not None

    def drop(self) -> None:
        """The question is moot (the caller moved on, or never heard it)."""
        self._held = None

    def reviewer(self, text: str, words: list[Word]) -> Review:
        """Before admission: calls built on doubtful words are held and the caller asked."""
        known = known_values(self._stt)

        def review(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
            if not doubtful_values(calls, words, known, self._floor):
                return None
            self._held = text
            return question(calls, words)

        return review

    def answer(self, yes: bool) -> list[tt.RunTurn | tt.SayLine]:
        """The caller's yes/no to "did you say ...?": the request runs as heard, or not."""
        held, self._held = self._held, None
        if held is not None:
            self._answered += 1
        return tt.answer_doubt(
            held, yes, connection_id=self._connection_id, answered=self._answered
        )
