"""Who holds the floor on a call, and whether what was heard may act: pure decisions.

- Backchannels: a short acknowledgement ("mm-hmm", "uh-huh", "sí") said while the agent
  talks is not a turn. With `continue_` the agent carries on (the cut utterance resumes at
  once from its first unheard word); otherwise it is a barge-in like any other speech.
- Heard before acting: a tool call from a voice turn whose argument words were recognised
  with low confidence, or that names something outside the values the recognizer knows
  (its catalogue of resource names, when it has one), is not admitted; the caller is asked
  "Did you say github and jira?" and says yes/no (or presses 1/2) first. A mishearing then
  costs one question, never a side effect.

`HOLDLINE_BACKCHANNELS` (comma-separated phrases), `HOLDLINE_BACKCHANNEL_CONTINUE` (1),
`HOLDLINE_STT_CONFIRM_BELOW` (0.6: a word below this confidence is doubtful; 0 turns the
confidence rule off), `HOLDLINE_STT_CONFIRM_UNKNOWN` (1: a value outside the catalogue is
doubtful).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BACKCHANNELS = (
    "mm hmm", "mhm", "mm", "hmm", "uh huh", "aha", "right", "sí", "si",
)
YES = frozenset({"yes", "yes please", "yeah", "correct", "sí", "si"})
NO = frozenset({"no", "no thanks", "nope"})
_WORD = re.compile(r"[^\w\s]+")


def normalise(text: str) -> str:
    """Lower case, hyphens and punctuation as spaces, single spaces."""
    return " ".join(_WORD.sub(" ", text.replace("-", " ").lower()).split())


@dataclass(frozen=True, slots=True)
class Word:
    """One recognised word and the recognizer's confidence in it (0-1)."""

    text: str
    confidence: float


@dataclass(frozen=True, slots=True)
class FloorConfig:
    """Backchannels and the confirmation of doubtful hearings (see the module docstring)."""

    # Comma-separated phrases that, said while the agent talks, are not a turn.
    backchannels: frozenset[str] = field(default_factory=lambda: frozenset(DEFAULT_BACKCHANNELS))
    # 1: after a backchannel the agent carries on; 0: it is a barge-in like any other speech.
    continue_on_backchannel: bool = True
    # A word recognised below this confidence is doubtful, so its tool call is confirmed first; 0
    # turns the rule off.
    confirm_below: float = 0.6
    # 1: a value outside the recognizer's catalogue is doubtful.
    confirm_unknown: bool = True


def is_backchannel(text: str, config: FloorConfig) -> bool:
    """Whether a transcript is only an acknowledgement (one phrase, or one repeated)."""
    said = normalise(text)
    if not said:
        return False
    if said in config.backchannels:
        return True
    # "mm hmm mm hmm", "right right": the same acknowledgement again.
    words = said.split()
    return len(words) <= 4 and all(w in config.backchannels for w in words)


def answer_of(text: str) -> bool | None:
    """A spoken yes (True) or no (False) to a question, or None when it is neither."""
    said = normalise(text)
    if said in YES:
        return True
    if said in NO:
        return False
    return None


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            yield from _strings(inner)


def doubtful_values(
    calls: Sequence[tuple[str, Mapping[str, Any]]],
    heard: Sequence[Word],
    known: frozenset[str],
    config: FloorConfig,
) -> list[str]:
    """The argument values of the proposed calls that came from doubtful hearing.

    A value is doubtful when one of its words was heard with confidence below the
    threshold, or when the recognizer has a catalogue and the value is a word it heard that
    is not in it. Values that no heard word produced (defaults the model filled in) are
    not the recognizer's doing and are left alone.
    """
    confidence: dict[str, float] = {}
    for word in heard:
        key = normalise(word.text)
        confidence[key] = min(confidence.get(key, 1.0), word.confidence)
    out: list[str] = []
    for _tool, arguments in calls:
        for value in _strings(arguments):
            words = normalise(value).split()
            from_speech = [w for w in words if w in confidence]
            if not from_speech:
                continue
            low = config.confirm_below > 0 and any(
                confidence[w] < config.confirm_below for w in from_speech
            )
            unknown = config.confirm_unknown and bool(known) and normalise(value) not in known
            if (low or unknown) and value not in out:
                out.append(value)
    return out


def spoken_values(calls: Sequence[tuple[str, Mapping[str, Any]]], heard: Sequence[Word]) -> str:
    """The heard argument values of the calls, for the question: "github and jira"."""
    said = {normalise(w.text) for w in heard}
    values: list[str] = []
    for _tool, arguments in calls:
        for value in _strings(arguments):
            if any(w in said for w in normalise(value).split()) and value not in values:
                values.append(value)
    if not values:
        return ""
    return values[0] if len(values) == 1 else ", ".join(values[:-1]) + " and " + values[-1]


def question(calls: Sequence[tuple[str, Mapping[str, Any]]], heard: Sequence[Word]) -> str:
    """What the agent asks before acting on a doubtful hearing."""
    values = spoken_values(calls, heard) or " ".join(w.text for w in heard)
    return f"Did you say {values}? Say yes or press 1 to go ahead, say no or press 2 to stop."
