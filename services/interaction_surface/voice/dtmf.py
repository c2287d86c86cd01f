"""Key presses as caller input (pure): yes/no to a pending question, else a typed entry.

During a pending confirmation (or a doubtful hearing) `1` means yes and `2` means no;
other digits are collected until `#` or an inter-digit pause and become the turn's text.
The call (call.py) keeps the entry, arms the pause timer and runs the turns.
"""

from __future__ import annotations

from dataclasses import dataclass

# An entry keeps its last digits only: a stuck key cannot grow it without bound.
MAX_DIGITS = 32


@dataclass(frozen=True, slots=True)
class AnswerDoubt:
    """Yes/no to "did you say ...?"."""

    yes: bool


@dataclass(frozen=True, slots=True)
class Turn:
    """The entry (or "yes"/"no") becomes a turn."""

    text: str


@dataclass(frozen=True, slots=True)
class Collect:
    """The digit was kept; (re)arm the pause that ends the entry."""


DtmfAction = AnswerDoubt | Turn | Collect | None


def may_confirm(entry: str, digit: str, *, doubt_pending: bool) -> bool:
    """Whether the key could answer a pending confirmation (only then is the view asked)."""
    return not entry and digit in ("1", "2") and not doubt_pending


def turn_id(connection_id: str, n: int) -> str:
    """The client turn id of the call's n-th key-press turn: a redelivery applies once."""
    return f"dtmf-{connection_id}-{n}"


def press(
    entry: str, digit: str, *, doubt_pending: bool, awaiting_confirmation: bool
) -> tuple[str, DtmfAction]:
    """The entry after `digit`, and what the call does about it (None: nothing)."""
    if not entry and digit in ("1", "2"):
        if doubt_pending:
            return entry, AnswerDoubt(digit == "1")
        if awaiting_confirmation:
            return entry, Turn("yes" if digit == "1" else "no")
    if digit == "#":
        return "", (Turn(entry) if entry else None)
    return (entry + digit)[-MAX_DIGITS:], Collect()


def pause(entry: str) -> tuple[str, Turn | None]:
    """The inter-digit pause passed: what was typed is the turn."""
    return "", (Turn(entry) if entry else None)
