"""Who has the floor: barge-in, false interruptions and backchannels as pure decisions.

The call (call.py) reports what happened (the VAD's verdicts, the recognizer's final
words, what it is playing) and carries out the actions returned here, in order. Nothing
here waits, sends or records, so the subtle rules (what was heard, when to cut, when to
resume) are tested without a socket (tests/voice/test_floor_decisions.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from libs.events import BargeIn as BargeInEvent

from .floor import FloorConfig, answer_of, is_backchannel
from .playback import Settled, unheard_rest

# Said when the caller answers "no" to "did you say ...?".
NOT_DONE = "Okay, I have not done anything. Please say it again, or press the keys."

# A resumed rest that is cut and proves false again resumes at most this many times.
MAX_RESUMES = 2
RESUME = ".resume"


@dataclass(frozen=True, slots=True)
class Hold:
    """Stop sending agent audio (nothing is flushed): voiced sound may be a barge-in."""


@dataclass(frozen=True, slots=True)
class Release:
    """Sending may go on."""


@dataclass(frozen=True, slots=True)
class CountFalseAlarm:
    """A held line proved to be a cough or a knock."""


@dataclass(frozen=True, slots=True)
class CancelVerdict:
    """More speech came before the false-interruption window ended: its own end decides."""


@dataclass(frozen=True, slots=True)
class BargeIn:
    """Cut the agent now (clear the line, settle or suspend what was playing)."""


@dataclass(frozen=True, slots=True)
class OpenRecognizer:
    """Start recognising the caller's utterance (fed the pre-roll first)."""


@dataclass(frozen=True, slots=True)
class RecordBackchannel:
    """The caller acknowledged ("mm-hmm") over the agent."""

    text: str
    continued: bool


@dataclass(frozen=True, slots=True)
class ResumeSuspended:
    """What the interruption cut goes on from its first unheard word."""


@dataclass(frozen=True, slots=True)
class SettleSuspended:
    """The interruption was real: what it cut stays unheard."""

    reason: str


@dataclass(frozen=True, slots=True)
class AwaitFalseInterruption:
    """Wait the false-interruption window; quiet throughout means resume."""


@dataclass(frozen=True, slots=True)
class AnswerDoubt:
    """The caller's yes/no to "did you say ...?"."""

    yes: bool


@dataclass(frozen=True, slots=True)
class DropDoubt:
    """A new request replaces the doubtful one."""


@dataclass(frozen=True, slots=True)
class RunTurn:
    """The caller's words become a turn (`client_turn_id` makes a repeat apply once)."""

    text: str
    client_turn_id: str | None = None


@dataclass(frozen=True, slots=True)
class SayLine:
    """The agent says a fixed line (no turn, no model)."""

    text: str
    playback_id: str


Action = (
    Hold | Release | CountFalseAlarm | CancelVerdict | BargeIn | OpenRecognizer
    | RecordBackchannel | ResumeSuspended | SettleSuspended | AwaitFalseInterruption
    | AnswerDoubt | DropDoubt | RunTurn | SayLine
)


@dataclass(frozen=True, slots=True)
class Floor:
    """What the call is doing when the VAD speaks: the facts the rules below read."""

    playing: bool
    flowing: bool
    replying: bool
    verdict_pending: bool
    recognizing: bool


def on_vad(kind: str, floor: Floor) -> list[Action]:
    """A VAD verdict other than `stopped` (whose words decide, `on_ended`)."""
    if kind == "suspected":
        return on_suspected(playing=floor.playing, flowing=floor.flowing)
    if kind == "rejected":
        return on_rejected(flowing=floor.flowing)
    if kind == "started":
        return on_started(
            playing=floor.playing, replying=floor.replying,
            verdict_pending=floor.verdict_pending, recognizing=floor.recognizing,
        )
    return []


def on_suspected(*, playing: bool, flowing: bool) -> list[Action]:
    """Voiced sound, not yet known to be speech: hold the agent's audio if it is going out."""
    return [Hold()] if playing and flowing else []


def on_rejected(*, flowing: bool) -> list[Action]:
    """The sound was not speech: a held line opens again."""
    return [] if flowing else [CountFalseAlarm(), Release()]


def on_started(
    *, playing: bool, replying: bool, verdict_pending: bool, recognizing: bool
) -> list[Action]:
    """Confirmed speech: cut the agent if it plays or is still composing a reply."""
    actions: list[Action] = [CancelVerdict()] if verdict_pending else []
    if playing or replying:
        actions.append(BargeIn())
    actions.append(Release())
    if recognizing:
        actions.append(OpenRecognizer())
    return actions


def on_ended(
    text: str,
    *,
    suspended: bool,
    cut_reply: bool,
    doubt_pending: bool,
    can_turn: bool,
    floor: FloorConfig,
) -> list[Action]:
    """The caller's utterance ended with `text` (stripped; '' when no words were heard).

    Over the agent, a backchannel is an acknowledgement (the agent goes on when the floor
    config says so). Words make a cut real; no words make it possibly false, decided after
    the quiet window. A yes/no answers a pending doubt; other words are a turn.
    """
    actions: list[Action] = []
    if (suspended or cut_reply) and is_backchannel(text, floor):
        actions.append(RecordBackchannel(text, floor.continue_on_backchannel))
        if floor.continue_on_backchannel:
            actions.append(ResumeSuspended())
            return actions
    if suspended:
        actions.append(SettleSuspended("barge_in") if text else AwaitFalseInterruption())
    if text and can_turn:
        if doubt_pending:
            answer = answer_of(text)
            if answer is not None:
                actions.append(AnswerDoubt(answer))
                return actions
            actions.append(DropDoubt())
        actions.append(RunTurn(text))
    return actions


def resumable(playback_id: str, *, recognizing: bool, false_interruption_ms: int) -> bool:
    """Whether a cut utterance waits for a verdict (it may resume) rather than settling."""
    return recognizing and false_interruption_ms > 0 and playback_id.count(RESUME) < MAX_RESUMES


@dataclass(frozen=True, slots=True)
class SayRest:
    """Say the unheard rest of a cut utterance as a new utterance."""

    text: str
    playback_id: str


@dataclass(frozen=True, slots=True)
class HeardAll:
    """Nothing of the cut utterance was left unheard: it settles as heard."""


def plan_resume(text: str, heard_text: str, playback_id: str) -> SayRest | HeardAll:
    """How a suspended utterance resumes: from its first unheard word, under a new mark."""
    rest = unheard_rest(text, heard_text)
    if not rest:
        return HeardAll()
    return SayRest(rest, f"{playback_id}{RESUME}{playback_id.count(RESUME) + 1}")


def resumed_played_ms(duration_ms: int, played_ms: int, *, rest_heard: bool) -> int:
    """The cut utterance's played time once its rest settled: all of it only if heard."""
    return duration_ms if rest_heard else min(duration_ms, played_ms)


def resumed(item: Settled, rest: Settled) -> Settled:
    """The cut utterance's outcome once its resumed rest settled: heard only if the rest was."""
    u = item.utterance
    played = resumed_played_ms(u.duration_ms, item.played_ms, rest_heard=rest.heard)
    return Settled(u, heard=rest.heard, played_ms=played, reason="resumed")


@dataclass(frozen=True, slots=True)
class Cut:
    """What a barge-in does with one utterance it flushed."""

    item: Settled
    # Waits for the interruption's verdict (it may resume) instead of settling unheard now.
    suspend: bool


@dataclass(frozen=True, slots=True)
class CutPlan:
    """A barge-in's outcome: each flushed utterance in order, and the event to record."""

    cuts: tuple[Cut, ...]
    event: BargeInEvent
    playback_id: str | None
    response_id: str | None
    delivery_id: str | None


def plan_cut(
    flushed: Sequence[Settled], *, recognizing: bool, false_interruption_ms: int
) -> CutPlan:
    """What the barge-in settles, what it suspends, and the `control.barge_in` it records
    (played and unheard totals; ids of the first utterance it cut)."""
    cuts = tuple(
        Cut(
            item,
            resumable(
                item.utterance.playback_id, recognizing=recognizing,
                false_interruption_ms=false_interruption_ms,
            ),
        )
        for item in flushed
    )
    first = flushed[0].utterance if flushed else None
    return CutPlan(
        cuts=cuts,
        event=BargeInEvent(
            played_ms=sum(s.played_ms for s in flushed),
            unheard_ms=sum(s.unheard_ms for s in flushed),
        ),
        playback_id=first.playback_id if first else None,
        response_id=first.response_id if first else None,
        delivery_id=first.delivery_id if first else None,
    )


def ask_again(question: str | None, *, connection_id: str) -> list[SayLine]:
    """A call opens on a session whose last "did you say ...?" was never answered (the call
    dropped first): the question is put again, before anything else."""
    if not question:
        return []
    return [SayLine(question, f"line-{connection_id}-again")]


def answer_doubt(
    doubt: str | None, yes: bool, *, connection_id: str, answered: int
) -> list[RunTurn | SayLine]:
    """The caller's yes/no to "did you say ...?" (`answered`: this is the n-th answer).

    Yes runs the held request as heard (its own client turn id, so it applies once); no
    says that nothing was done.
    """
    if doubt is None:
        return []
    if yes:
        return [RunTurn(doubt, f"heard-{connection_id}-{answered}")]
    return [SayLine(NOT_DONE, f"line-{connection_id}-{answered}")]
