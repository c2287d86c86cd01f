"""Playback truth: what the caller actually heard, from Twilio marks and clears.

Every utterance goes out as media followed by a mark named after its playback id (the
delivery id for a closing, the response id for a reply). Twilio echoes a mark when the
audio before it has played, and also echoes every pending mark when the app sends
`clear`. So a returned mark proves nothing by itself: an utterance is heard only when its
mark comes back and no clear was sent while it was pending. A clear settles every pending
utterance at once as unheard, with the milliseconds that had played by then; marks that
Twilio echoes afterwards are swallowed.

Played time is estimated from a playout model: the phone plays utterances back to back,
each starting when it was sent or when the previous one ended, whichever is later; a
returned mark re-anchors the model on the real clock. Pure: the caller passes `now_ms`.

Also pure here: what the call records when an utterance settles (`finished`) and when a
reply was not all heard (`truncated`, `unsaid`), whether an utterance is abandoned before
it is sent (`abandon_reason`), and how long paced sending waits (`pace_delay_ms`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from libs.events import PlaybackFinished, ReplyTruncated, ResponseCancel


@dataclass
class Utterance:
    """One piece of agent audio on its way to the caller."""

    playback_id: str
    text: str
    started_ms: int
    duration_ms: int = 0
    # All audio and the mark were sent; until then the mark cannot come back.
    complete: bool = False
    delivery_id: str | None = None
    response_id: str | None = None
    turn_id: str | None = None

    def played_ms(self, now_ms: int) -> int:
        """How much of it had played at `now_ms` by the playout model."""
        return max(0, min(self.duration_ms, now_ms - self.started_ms))


@dataclass(frozen=True, slots=True)
class Settled:
    """An utterance's outcome: heard (its mark came back cleanly) or not."""

    utterance: Utterance
    heard: bool
    played_ms: int
    reason: str

    @property
    def unheard_ms(self) -> int:
        """Audio generated but never played."""
        return max(0, self.utterance.duration_ms - self.played_ms)

    @property
    def heard_text(self) -> str:
        """The words the caller could have heard."""
        if self.heard:
            return self.utterance.text
        return heard_prefix(self.utterance.text, self.played_ms, self.utterance.duration_ms)


def carried_heard(text: str, settled: Settled) -> bool:
    """Whether a closing carried inside a reply was heard: the reply was, or every word of
    the closing is in what the history keeps of it (saying it again would repeat it)."""
    return settled.heard or (bool(text) and text in settled.heard_text)


def heard_prefix(text: str, played_ms: int, duration_ms: int) -> str:
    """The words spoken within `played_ms`, assuming an even speech rate over the text.

    A word counts only once all of it fits in the played share.
    """
    if duration_ms <= 0 or played_ms <= 0:
        return ""
    if played_ms >= duration_ms:
        return text
    budget = len(text) * played_ms / duration_ms
    words: list[str] = []
    position = 0
    for word in text.split():
        position = text.index(word, position) + len(word)
        if position > budget:
            break
        words.append(word)
    return " ".join(words)


def unheard_rest(text: str, heard: str) -> str:
    """The words of `text` after its heard prefix `heard` (what a resume has to say)."""
    return " ".join(text.split()[len(heard.split()) :])


@dataclass
class PlaybackLedger:
    """The utterances pending on one call, in the order they were sent."""

    pending: dict[str, Utterance] = field(default_factory=dict)
    _swallow: set[str] = field(default_factory=set)
    _playout_end_ms: int = 0

    @property
    def active(self) -> bool:
        """Something was sent and not yet settled."""
        return bool(self.pending)

    def begin(
        self,
        playback_id: str,
        text: str,
        now_ms: int,
        *,
        delivery_id: str | None = None,
        response_id: str | None = None,
        turn_id: str | None = None,
    ) -> Utterance:
        """A new utterance starts being sent; it plays after whatever is queued before it."""
        start = max(now_ms, self._playout_end_ms)
        utterance = Utterance(
            playback_id, text, start,
            delivery_id=delivery_id, response_id=response_id, turn_id=turn_id,
        )
        self.pending[playback_id] = utterance
        self._playout_end_ms = start
        return utterance

    def queued_ms(self, now_ms: int) -> int:
        """Audio sent but not yet played by the playout model (what a clear would flush)."""
        return max(0, self._playout_end_ms - now_ms)

    def add_audio(self, playback_id: str, ms: int, now_ms: int | None = None) -> None:
        """More of the utterance's audio was sent (at `now_ms`, when known)."""
        utterance = self.pending.get(playback_id)
        if utterance is None:
            return
        if now_ms is not None and now_ms > utterance.started_ms + utterance.duration_ms:
            # The phone ran dry (the call held its audio, or the TTS was slow): what it had
            # played out, and the new audio plays from now.
            utterance.started_ms = now_ms - utterance.duration_ms
        utterance.duration_ms += ms
        end = utterance.started_ms + utterance.duration_ms
        self._playout_end_ms = max(self._playout_end_ms, end)

    def sent(self, playback_id: str) -> None:
        """Its mark followed the audio."""
        utterance = self.pending.get(playback_id)
        if utterance is not None:
            utterance.complete = True

    def on_mark(self, name: str, now_ms: int) -> Settled | None:
        """A mark came back: heard, unless a clear was sent while it was pending."""
        if name in self._swallow:
            self._swallow.discard(name)
            return None
        utterance = self.pending.pop(name, None)
        if utterance is None:
            return None
        # The real clock says this one ended now: later utterances started then at the earliest.
        shift = now_ms - (utterance.started_ms + utterance.duration_ms)
        if shift > 0:
            for later in self.pending.values():
                later.started_ms += shift
            self._playout_end_ms += shift
        if not self.pending:
            # Nothing else was sent: the line is empty now, however early the mark came.
            self._playout_end_ms = now_ms
        return Settled(utterance, heard=True, played_ms=utterance.duration_ms, reason="mark")

    def clear(self, now_ms: int, reason: str) -> list[Settled]:
        """A clear was sent (or the call ended): every pending utterance is unheard."""
        settled = [
            Settled(u, heard=False, played_ms=u.played_ms(now_ms), reason=reason)
            for u in self.pending.values()
        ]
        self._swallow.update(u.playback_id for u in self.pending.values() if u.complete)
        self.pending.clear()
        self._playout_end_ms = now_ms
        return settled

    def drop(self, playback_id: str, now_ms: int, reason: str) -> Settled | None:
        """An utterance abandoned before its mark was sent (its TTS was cancelled)."""
        utterance = self.pending.pop(playback_id, None)
        if utterance is None:
            return None
        return Settled(utterance, heard=False, played_ms=utterance.played_ms(now_ms), reason=reason)


def unheard(item: Settled, reason: str) -> Settled:
    """The same utterance settled as not heard (a suspension that proved real, or a hang-up)."""
    return Settled(item.utterance, heard=False, played_ms=item.played_ms, reason=reason)


def finished(item: Settled) -> tuple[PlaybackFinished, dict[str, str | None]]:
    """The `playback.finished` an utterance's outcome is recorded as, with its ids."""
    u = item.utterance
    event = PlaybackFinished(heard=item.heard, played_ms=item.played_ms, unheard_ms=item.unheard_ms)
    refs = {
        "playback_id": u.playback_id,
        "delivery_id": u.delivery_id,
        "response_id": u.response_id,
        "turn_id": u.turn_id,
    }
    return event, refs


def truncated(
    settled: Settled, attached: Sequence[str], texts: Mapping[str, str]
) -> ReplyTruncated | None:
    """A reply's `reply.truncated` (history keeps only heard words), None when all was heard.

    The closings it carried (`attached`, with their `texts`) whose words were not all heard
    are named, so they are said again later rather than lost.
    """
    if settled.heard:
        return None
    return ReplyTruncated(
        text=settled.heard_text,
        played_ms=settled.played_ms,
        unheard_ms=settled.unheard_ms,
        unheard_delivery_ids=tuple(
            d for d in attached if not carried_heard(texts.get(d, ""), settled)
        ),
    )


def unsaid() -> tuple[ResponseCancel, ReplyTruncated]:
    """A reply generated while the caller barged in, never played: cancelled, none of it kept."""
    return ResponseCancel(reason="barge_in"), ReplyTruncated(text="", played_ms=0, unheard_ms=0)


def abandon_reason(
    *,
    closed: bool,
    cut_while_queued: bool,
    interrupt: bool,
    is_delivery: bool,
    caller_speaking: bool,
) -> str | None:
    """Why an utterance waiting for the line is dropped unsent, or None to say it.

    A barge-in while it was queued means the caller moved on; a closing decided on a view
    that had not yet seen the caller start talking is not said over them (only an urgent
    one, `interrupt`, talks over a caller).
    """
    if closed:
        return "call_ended"
    if cut_while_queued:
        return "barge_in"
    if not interrupt and is_delivery and caller_speaking:
        return "user_speaking"
    return None


def pace_delay_ms(lead_ms: int, queued_ms: int) -> int:
    """How long paced sending waits before the next piece (0: send it now).

    At most `lead_ms` of audio is queued ahead of the playout model, so a stop (hold or
    clear) costs at most the lead plus one piece; a lead of 0 sends everything at once.
    """
    if lead_ms <= 0 or queued_ms <= lead_ms:
        return 0
    return queued_ms - lead_ms
