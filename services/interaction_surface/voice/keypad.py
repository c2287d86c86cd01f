"""One call's key presses (`Keypad`): the entry typed so far, its pause timer, and its turns.

What a key means is `dtmf`'s (pure); this keeps the entry and the timer, asks whether an
operation waits for a yes or no only when the key could answer it, and hands the call
what to do: answer a doubtful hearing, or run the entry as a turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from . import dtmf


class Keypad:
    """The key presses of one call's session."""

    def __init__(
        self,
        connection_id: str,
        session_id: str,
        *,
        pause_ms: int,
        # Whether an operation of the session waits for the caller's yes or no.
        awaiting_confirmation: Callable[[str], bool] | None,
        # Whether a doubtful hearing waits for the caller's yes or no.
        doubt_pending: Callable[[], bool],
        answer_doubt: Callable[[bool], None],
        # Runs the entry as a turn, under its client turn id (a redelivery applies once).
        run_turn: Callable[[str, str], None],
    ) -> None:
        self._connection_id = connection_id
        self._session_id = session_id
        self._pause_ms = pause_ms
        self._awaiting = awaiting_confirmation
        self._doubt_pending = doubt_pending
        self._answer_doubt = answer_doubt
        self._run_turn = run_turn
        self._digits = ""
        self._turns = 0
        self._timer: asyncio.Task[None] | None = None

    def press(self, digit: str) -> None:
        """A key press: yes/no to a pending question, else part of a typed entry."""
        self.cancel()
        doubt = self._doubt_pending()
        # The view is asked only when the key could be an answer to it.
        confirming = (
            dtmf.may_confirm(self._digits, digit, doubt_pending=doubt)
            and self._awaiting is not None and self._awaiting(self._session_id)
        )
        self._digits, action = dtmf.press(
            self._digits, digit, doubt_pending=doubt, awaiting_confirmation=confirming,
        )
        self._on_keys(action)

    def cancel(self) -> None:
        """Stop the pause timer (a new key, or the call ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_keys(self, action: dtmf.DtmfAction) -> None:
        match action:
            case dtmf.AnswerDoubt(yes=yes):
                self._answer_doubt(yes)
            case dtmf.Turn(text=text):
                self._turns += 1
                self._run_turn(text, dtmf.turn_id(self._connection_id, self._turns))
            case dtmf.Collect():
                self._timer = asyncio.create_task(self._pause())
            case None:
                pass

    async def _pause(self) -> None:
        await asyncio.sleep(self._pause_ms / 1000)
        self._timer = None
        self._digits, action = dtmf.pause(self._digits)
        self._on_keys(action)
