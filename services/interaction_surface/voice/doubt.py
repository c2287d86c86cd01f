"""A request heard with doubt (`Doubt`), waiting for the caller's yes or no.

Before admission, a voice turn's proposed calls are reviewed: calls built on doubtful
words (`floor.doubtful_values`) are held and the caller is asked "did you say ...?"
(`floor.question`); the answer, spoken or keyed, runs the request as heard or says that
nothing was done (`turn_taking.answer_doubt`). The question is an event of the session
(`hearing.asked`, then `hearing.settled`): when the call drops before the answer, the
session's next call asks it again (`turn_taking.ask_again`). What an answer or a question
asked again starts (a turn, a fixed line) the call runs (`start`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from libs.domain import PendingHearing
from libs.events import HearingAsked, HearingSettled

from . import turn_taking as tt
from .engines.base import SpeechToText, known_values
from .floor import FloorConfig, Word, doubtful_values, question
from .ports import Review


class Doubt:
    """One call's held request, if any, and how many were answered."""

    def __init__(
        self,
        connection_id: str,
        stt: SpeechToText | None,
        floor: FloorConfig,
        record: Callable[..., None] = lambda event, **ids: None,
        start: Callable[[tt.RunTurn | tt.SayLine], None] = lambda action: None,
    ) -> None:
        self._connection_id = connection_id
        # Records an interaction event of the call's session (ids as keyword arguments).
        self._record = record
        # Runs a turn or a fixed line on the call, in the background.
        self._start = start
        self._stt = stt
        self._floor = floor
        self._held: str | None = None
        self._question = ""
        # Whether the held question is recorded (`hearing.asked`), so its end is too.
        self._recorded = False
        self._answered = 0

    def pending(self) -> bool:
        """A question waits for the caller's yes or no."""
        return self._held is not None

    def drop(self) -> None:
        """The question is moot (the caller moved on, or never heard it)."""
        self._settle("replaced")

    def _settle(self, answer: Literal["yes", "no", "replaced"]) -> None:
        recorded = self._held is not None and self._recorded
        self._held, self._recorded = None, False
        if recorded:
            self._record(HearingSettled(answer=answer))

    def asked(self, **ids: Any) -> None:
        """A question was just put to the caller: recorded once (`hearing.asked`), before it
        is said, so a call that drops leaves it pending on the session."""
        if self._held is None or self._recorded:
            return
        self._recorded = True
        self._record(
            HearingAsked(text=self._held, question=self._question,
                         connection_id=self._connection_id),
            **ids,
        )

    def restore(self, pending: PendingHearing) -> None:
        """A question an earlier call asked and nobody answered: held again, as recorded."""
        self._held, self._question, self._recorded = pending.text, pending.question, True

    def reviewer(self, text: str, words: list[Word]) -> Review:
        """Before admission: calls built on doubtful words are held and the caller asked."""
        known = known_values(self._stt)

        def review(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
            if not doubtful_values(calls, words, known, self._floor):
                return None
            self._held = text
            self._recorded = False
            self._question = question(calls, words)
            return self._question

        return review

    def answer(self, yes: bool) -> list[tt.RunTurn | tt.SayLine]:
        """The caller's yes/no to "did you say ...?": the request runs as heard, or not."""
        held = self._held
        self._settle("yes" if yes else "no")
        if held is not None:
            self._answered += 1
        return tt.answer_doubt(
            held, yes, connection_id=self._connection_id, answered=self._answered
        )

    def on_answer(self, yes: bool) -> None:
        """The caller's yes/no, spoken or keyed: what it decides starts on the call."""
        for action in self.answer(yes):
            self._start(action)

    def ask_again(self, pending: PendingHearing | None) -> None:
        """The session's unanswered "did you say ...?" (an earlier call dropped): held again
        as recorded and asked again, so the caller's yes or no answers it."""
        for action in tt.ask_again(
            pending.question if pending else None, connection_id=self._connection_id
        ):
            assert pending is not None
            self.restore(pending)
            self._start(action)
