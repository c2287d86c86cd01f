"""One call's shell (`Call`), whatever transport carries it: it feeds audio to the VAD and
the recognizer and carries out what the pure rules decide; the agent's audio goes out
through `outbound.Playout` onto the transport's `wire.CallWire`.

The rules, and where they live (each tested without a socket, tests/voice):
- `turn_taking`: suspected speech holds the line (nothing flushed; `rejected` opens it
  again); confirmed speech over the agent cuts it (`plan_cut`: settle, or suspend for the
  false-interruption verdict); what the caller's words mean when they end (backchannel,
  resume, a real interruption, a yes/no to a doubt, a turn); how a cut utterance resumes
  from its first unheard word (`plan_resume`, `resumed`).
- `playback`: what was heard (marks and clears), what a settled utterance or a cut reply
  records (`finished`, `truncated`, `unsaid`), when a queued utterance is dropped unsent.
- `dtmf`: key presses as yes/no or a typed entry; `floor`: backchannels, doubtful hearings.
The parts of a call with state of their own: `SuspendedAudio` (what a barge-in cut, until
the verdict), `Doubt` (a request held for a yes or no), `Keypad` (a typed entry and its
timer), `outbound.Playout` (the audio going out), `Recorder` (the ordered writes).

Barge-in order (the latency that matters): `clear` is sent first, nothing awaited on the
bus before it; then `control.barge_in`, `playback.finished` and, for a cut reply,
`reply.truncated` are recorded in order by the call's `Recorder`. Operations are untouched:
cancelling business is a turn's job. `perf_counter` only measures that latency.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

from libs import metrics
from libs.domain import SessionState
from libs.events import (
    Backchannel,
    ChannelDisconnected,
    ControlEvent,
    InteractionEvent,
    PlaybackStarted,
    SpeechStarted,
    SpeechStopped,
)

from . import playback as pb
from . import turn_taking as tt
from .codec import PCM_FRAME_BYTES, FrameSplitter, ulaw_to_pcm16
from .doubt import Doubt
from .engines.base import Recognizer, final_text, heard_words
from .keypad import Keypad
from .outbound import Playout
from .playback import PlaybackLedger, Settled
from .ports import Review, SpeechPorts
from .recorder import Recorder
from .registry import CallRegistry
from .suspended import SuspendedAudio
from .vad import VadEvent, VoiceActivity
from .wire import CallWire

__all__ = ["CALLS", "FRAMES_REJECTED", "Call", "CallRegistry", "Review", "SpeechPorts"]

log = logging.getLogger(__name__)

FRAMES_REJECTED = metrics.TELEPHONY_FRAMES_REJECTED
CALLS = metrics.TELEPHONY_CALLS

_WALL_FRAMES = 256
# Speech is confirmed up to the VAD's confirm window after its first voiced frame: the
# recognizer still gets the first syllable.
_PREROLL_FRAMES = 25


class Call:
    """One phone call attached to one session."""

    def __init__(
        self,
        wire: CallWire,
        session: SessionState,
        call_sid: str,
        ports: SpeechPorts,
    ) -> None:
        self.session = session
        self.session_id = session.session_id
        self.connection_id = f"call_{call_sid}"
        self.ports = ports
        self.out = Playout(
            wire, name=self.connection_id, tts=ports.tts,
            lead_ms=ports.playout_lead_ms,
            started=self._record_started,
            finished=self._record_finished,
        )
        self.vad = VoiceActivity(ports.vad)
        self.splitter = FrameSplitter(PCM_FRAME_BYTES)
        self.rejected: dict[str, int] = {}
        self._stream_ms = 0
        self._frame_wall: deque[tuple[int, float]] = deque(maxlen=_WALL_FRAMES)
        self._recorder = Recorder(self.connection_id, log)
        self._recognizer: Recognizer | None = None
        # Audio just before VAD confirmed speech: the recognizer must hear the first syllable.
        self._preroll: deque[bytes] = deque(maxlen=_PREROLL_FRAMES)
        self._turn_task: asyncio.Task[None] | None = None
        self._cancelled_turns: set[asyncio.Task[None]] = set()
        self.last_barge_in_s: float | None = None
        self._resumes: set[asyncio.Task[None]] = set()
        # Cut by a barge-in whose verdict (real or false) is not known yet.
        self._cut = SuspendedAudio(
            self.out, name=self.connection_id, window_ms=ports.vad.false_interruption_ms,
            say=self.say, track=self._track, record_finished=self._record_finished,
            not_a_turn=self._cancelled_turns.clear,
        )
        # A request heard with doubt, waiting for the caller's yes or no.
        self._doubt = Doubt(
            self.connection_id, ports.stt, ports.floor, record=self.interaction, start=self._start
        )
        self._keypad = Keypad(
            self.connection_id, self.session_id, pause_ms=ports.dtmf_pause_ms,
            awaiting_confirmation=ports.awaiting_confirmation,
            doubt_pending=self._doubt.pending, answer_doubt=self._doubt.on_answer,
            run_turn=self._run_turn,
        )
        self.held_since: float | None = None
        self.false_alarms = 0

    @property
    def ledger(self) -> PlaybackLedger:
        """What is playing on the call and what was heard."""
        return self.out.ledger

    @property
    def closed(self) -> bool:
        """The call ended."""
        return self.out.closed

    def now_ms(self) -> int:
        """Milliseconds since the call started (the playout model's clock)."""
        return self.out.now_ms()

    def interaction(self, event: InteractionEvent, **ids: Any) -> None:
        """Record an interaction event of this call's session (queued, in order)."""
        self._recorder.put(lambda: self.ports.record(self.session_id, event, **ids))

    def control(self, event: ControlEvent, **ids: Any) -> None:
        """Record a control event of this call's session (queued, in order)."""
        self._recorder.put(lambda: self.ports.append_control(self.session_id, event, **ids))

    async def drain(self) -> None:
        """Finish every queued write."""
        await self._recorder.drain()

    # ------------------------------------------------------------------ inbound

    def reject(self, reason: str) -> None:
        """Count a dropped frame."""
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        FRAMES_REJECTED.labels(reason=reason).inc()
        log.warning("call %s: frame dropped (%s)", self.connection_id, reason)

    async def on_media(self, ulaw: bytes) -> None:
        """Inbound audio: VAD per 20 ms frame, then barge-in or turn-taking."""
        for frame in self.splitter.push(ulaw_to_pcm16(ulaw)):
            self._stream_ms += 20
            self._frame_wall.append((self._stream_ms, time.perf_counter()))
            self._preroll.append(frame)
            if self._recognizer is not None:
                self._recognizer.feed(frame)
            event = self.vad.feed(frame, self._stream_ms)
            if event is not None:
                await self._on_vad(event)

    def _wall_of(self, stream_ms: int) -> float:
        for at, wall in self._frame_wall:
            if at >= stream_ms:
                return wall
        return time.perf_counter()

    async def _on_vad(self, event: VadEvent) -> None:
        """The VAD's verdict: the rules in `turn_taking` decide, this carries them out."""
        if event.kind == "stopped":
            self.interaction(SpeechStopped(stream_ms=event.at_ms))
            await self._on_ended()
            return
        floor = tt.Floor(
            playing=self.ledger.active,
            flowing=self.out.flowing,
            replying=self._turn_task is not None,
            verdict_pending=self._cut.verdict_pending,
            recognizing=self.ports.stt is not None,
        )
        voiced_wall = 0.0 if event.kind == "rejected" else self._wall_of(event.first_voiced_ms + 20)
        for action in tt.on_vad(event.kind, floor):
            await self._apply(action, voiced_wall)
        if event.kind == "started":
            self.interaction(SpeechStarted(stream_ms=event.first_voiced_ms))

    async def _on_ended(self) -> None:
        recognizer, self._recognizer = self._recognizer, None
        text = (await final_text(recognizer)).strip() if recognizer is not None else ""
        words = heard_words(recognizer, text) if recognizer is not None else []
        actions = tt.on_ended(
            text,
            suspended=self._cut.waiting,
            cut_reply=bool(self._cancelled_turns),
            doubt_pending=self._doubt.pending(),
            can_turn=self.ports.turn is not None,
            floor=self.ports.floor,
        )
        for action in actions:
            if isinstance(action, tt.RunTurn):
                # Heard words: the turn's calls are reviewed for doubtful hearing first.
                review = self._doubt.reviewer(action.text, words)
                self._turn_task = asyncio.create_task(self._turn(action.text, review=review))
            else:
                await self._apply(action, 0.0)

    async def _apply(self, action: tt.Action, voiced_wall: float) -> None:
        """Carry out one decision of `turn_taking`."""
        match action:
            case tt.Hold():
                self.out.hold()
                self.held_since = voiced_wall
            case tt.CountFalseAlarm():
                self.false_alarms += 1
            case tt.Release():
                self._release()
            case tt.CancelVerdict():
                self._cut.cancel_verdict()
            case tt.BargeIn():
                await self.barge_in(voiced_wall)
            case tt.OpenRecognizer():
                assert self.ports.stt is not None
                self._recognizer = self.ports.stt.session()
                for earlier in self._preroll:
                    self._recognizer.feed(earlier)
            case tt.RecordBackchannel(text=text, continued=continued):
                self.control(Backchannel(text=text, continued=continued))
            case tt.ResumeSuspended():
                self._cut.resume()
            case tt.SettleSuspended(reason=reason):
                self._cut.settle(reason)
            case tt.AwaitFalseInterruption():
                self._cut.await_verdict()
            case tt.AnswerDoubt(yes=yes):
                self._doubt.on_answer(yes)
            case tt.DropDoubt():
                self._doubt.drop()
            case tt.RunTurn() | tt.SayLine():
                self._start(action)

    def ask_again(self) -> None:
        """The session's unanswered "did you say ...?" (an earlier call dropped), asked again
        (`Doubt.ask_again`)."""
        self._doubt.ask_again(self.session.pending_hearing)

    def _start(self, action: tt.RunTurn | tt.SayLine) -> None:
        """A turn, or a fixed line, runs in the background."""
        if isinstance(action, tt.RunTurn):
            self._run_turn(action.text, action.client_turn_id)
        else:
            self._track(asyncio.create_task(self.say(action.text, action.playback_id)))

    def _track(self, task: asyncio.Task[Any]) -> None:
        """Keep a background say (a resume, a fixed line) alive until it is done."""
        self._resumes.add(task)
        task.add_done_callback(self._resumes.discard)

    def _release(self) -> None:
        """Sending may go on (a false alarm, or the barge-in already flushed the line)."""
        self.held_since = None
        self.out.release()

    async def barge_in(self, first_voiced_wall: float) -> None:
        """The user spoke over the agent: stop the voice now, then record what was heard."""
        flushed: list[Settled] = []
        self.out.cut()
        if self.ledger.active:
            await self.out.clear()
            self.last_barge_in_s = time.perf_counter() - first_voiced_wall
            metrics.BARGE_IN.observe(self.last_barge_in_s)
            flushed = self.ledger.clear(self.now_ms(), "barge_in")
        turn = self._turn_task
        if turn is not None and not turn.done():
            # The reply is not said; the turn's admission (business) still completes.
            self._cancelled_turns.add(turn)
        plan = tt.plan_cut(
            flushed,
            recognizing=self.ports.stt is not None,
            false_interruption_ms=self.ports.vad.false_interruption_ms,
        )
        for cut in plan.cuts:
            if cut.suspend:
                self._cut.suspend(cut.item)
            else:
                self.out.settle(cut.item)
        self.control(
            plan.event,
            playback_id=plan.playback_id,
            response_id=plan.response_id,
            delivery_id=plan.delivery_id,
        )

    def on_mark(self, name: str) -> None:
        """A mark came back from the phone."""
        self.out.on_mark(name)

    def _record_started(self, event: PlaybackStarted, refs: dict[str, Any]) -> None:
        self.interaction(event, **refs)

    def _record_finished(self, item: Settled) -> None:
        if not item.heard:
            metrics.CANCELLED_UNHEARD_AUDIO.observe(item.unheard_ms / 1000)
        event, refs = pb.finished(item)
        self.interaction(event, **refs)

    # ------------------------------------------------------------------ DTMF

    def on_dtmf(self, digit: str) -> None:
        """A key press: yes/no to a pending confirmation, else part of a typed entry."""
        if self.ports.turn is not None:
            self._keypad.press(digit)

    # ------------------------------------------------------------------ outbound

    async def say(
        self, text: str, playback_id: str, *, interrupt: bool = False, **ids: str | None
    ) -> Settled:
        """Speak `text`; the answer says whether it was heard, and how much of it played."""
        return await self.out.say(
            text, playback_id, interrupt=interrupt, caller_speaking=lambda: self.vad.speaking,
            ids=ids,
        )

    # ------------------------------------------------------------------ turns

    def _run_turn(self, text: str, client_turn_id: str | None = None) -> None:
        self._turn_task = asyncio.create_task(self._turn(text, client_turn_id))

    async def _turn(
        self, text: str, client_turn_id: str | None = None, review: Review | None = None
    ) -> None:
        assert self.ports.turn is not None
        task = asyncio.current_task()
        extra = (review,) if review is not None else ()
        turn_id, response_id, reply, attached = await self.ports.turn(
            self.session, text, client_turn_id, *extra
        )
        if task in self._cancelled_turns:
            self._cancelled_turns.discard(task)
            # A question the caller never heard cannot be answered.
            self._doubt.drop()
            cancel, truncated = pb.unsaid()
            self.control(cancel, turn_id=turn_id, response_id=response_id)
            self.interaction(truncated, turn_id=turn_id, response_id=response_id)
            if self.ports.settle_attached is not None and attached:
                await self.ports.settle_attached(
                    self.session_id,
                    attached,
                    self.out.abandon(
                        response_id, reply, "barge_in",
                        {"turn_id": turn_id, "response_id": response_id},
                    ),
                )
            return
        if self._turn_task is task:
            self._turn_task = None
        self._doubt.asked(turn_id=turn_id, response_id=response_id)
        settled = await self.say(reply, response_id, turn_id=turn_id, response_id=response_id)
        if not settled.heard:
            texts = self.ports.delivery_texts(attached) if self.ports.delivery_texts else {}
            cut = pb.truncated(settled, attached, texts)
            if cut is not None:
                self.interaction(cut, turn_id=turn_id, response_id=response_id)
        if self.ports.settle_attached is not None and attached:
            await self.ports.settle_attached(self.session_id, attached, settled)

    # ------------------------------------------------------------------ end

    async def hang_up(self, reason: str) -> None:
        """The call ended: pending audio was not heard; pending deliveries stay pending.

        `channel.disconnected` is stored before any delivery is settled unheard, so the
        policy never re-decides a delivery while it still believes the call is there.
        """
        self.out.close()
        gone = ChannelDisconnected(channel="voice", connection_id=self.connection_id, reason=reason)
        await self._recorder.write(lambda: self.ports.record(self.session_id, gone))
        self._cut.cancel_verdict()
        self._keypad.cancel()
        for item in self.ledger.clear(self.now_ms(), reason):
            self.out.settle(item)
        self._cut.settle(reason)
        self.out.stop_all()
        if self._turn_task is not None and not self._turn_task.done():
            self._cancelled_turns.add(self._turn_task)
        CALLS.labels(outcome=reason).inc()
        await self.drain()
