"""One phone call's shell (`Call`): it feeds audio to the VAD and the recognizer, paces the
agent's audio out, and carries out what the pure rules decide.

Paced playout: the agent's audio goes out at the pace it plays, `playout_lead_ms` ahead of
the playout model. A suspected barge-in (the VAD's `suspected`: voiced, not yet known to be
speech) closes a gate: nothing more is sent and nothing is flushed; `rejected` (a cough, a
knock, background talk) opens it again and sending continues at the next byte.

Barge-in: the VAD's `started` while agent audio is pending sends `clear` first (nothing is
awaited on the bus before it), settles every pending utterance as unheard with its played
milliseconds, cancels TTS and any reply still being generated, then records
`control.barge_in`, `playback.finished` and, for a cut reply, `reply.truncated` (history
keeps only heard words). Operations are untouched: cancelling business is a turn's job.

False interruptions (a cough, a door): with a recognizer on the call, the utterances a
barge-in cut are suspended rather than settled. If the caller's speech ends with no words
and `false_interruption_ms` of quiet follows, the agent resumes from the first unheard word
(a new utterance, mark `<playback id>.resume<n>`, recorded with `playback.started` /
`playback.finished` and the same delivery/response ids) and the cut utterance settles as
heard only if the resumed rest is heard; history then holds the text once. Words in the
caller's speech make the interruption real: the suspended utterances settle unheard.
Resuming rather than repeating: the caller already heard the prefix, and a repeat would
make the history's single copy of the text untrue about what was said twice.

DTMF: a key press is caller input, decided in `dtmf` (pure). During a pending confirmation
`1` means yes and `2` means no; any other digits are collected until `#` or a pause and
become the turn's text. Either way the call runs a turn recorded as `turn.received`
(channel voice) whose `client_turn_id` is `dtmf-<call>-<n>`, so the key press is visible
and never applied twice.

Backchannels and doubtful hearings are decided in `floor` (pure); the call applies them:
an acknowledgement over the agent resumes what it cut, and a voice turn's calls built on
doubtful words wait for the caller's yes (`_reviewer`, `_answer_doubt`).

Long (about 750 lines) because one call is one state machine (inbound audio, playout,
barge-in, resumes, DTMF, turns) whose parts share its state and its tasks; the decisions
are pure code in `vad`, `playback`, `floor`, `turn_taking` and `dtmf`, and what remains
here is waiting, sending and recording.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from fastapi import WebSocket, WebSocketDisconnect

from libs import metrics
from libs.domain import SessionState
from libs.events import (
    Backchannel,
    BargeIn,
    ChannelDisconnected,
    ControlEvent,
    InteractionEvent,
    PlaybackFinished,
    PlaybackStarted,
    ReplyTruncated,
    ResponseCancel,
    SpeechStarted,
    SpeechStopped,
)

from . import dtmf
from . import turn_taking as tt
from .codec import PCM_FRAME_BYTES, FrameSplitter, ulaw_ms, ulaw_to_pcm16
from .engines.base import (
    Recognizer,
    SpeechToText,
    TextToSpeech,
    final_text,
    heard_words,
    known_values,
)
from .floor import FloorConfig, Word, doubtful_values, question
from .playback import PlaybackLedger, Settled, carried_heard
from .vad import VadConfig, VadEvent, VoiceActivity

log = logging.getLogger(__name__)

FRAMES_REJECTED = metrics.TELEPHONY_FRAMES_REJECTED
CALLS = metrics.TELEPHONY_CALLS

# Outbound media message size: 40 ms of μ-law, so paced sending stops within 40 ms.
_MEDIA_BYTES = 320
_WALL_FRAMES = 256
# Speech is confirmed up to the VAD's confirm window after its first voiced frame: the
# recognizer still gets the first syllable.
_PREROLL_FRAMES = 25
# Said when the caller answers "no" to "did you say ...?".
_NOT_DONE = "Okay, I have not done anything. Please say it again, or press the keys."
# Looks at a voice turn's proposed calls before admission (see `floor.doubtful_values`).
Review = Callable[[Sequence[tuple[str, Mapping[str, Any]]]], str | None]



@dataclass
class SpeechPorts:
    """What a call needs from the rest of the surface (wired in `api`/`app`)."""

    tts: TextToSpeech
    stt: SpeechToText | None
    vad: VadConfig
    # Appends an interaction event for the session (ids as keyword arguments).
    record: Callable[..., Awaitable[Any]]
    append_control: Callable[..., Awaitable[Any]]
    # Runs a user turn from a transcript (and a client turn id for DTMF input);
    # returns (turn_id, response_id, text, attached).
    turn: Callable[..., Awaitable[tuple[str, str, str, tuple[str, ...]]]] | None
    # Called with every settled reply that carried attached deliveries.
    settle_attached: Callable[[str, tuple[str, ...], Settled], Awaitable[None]] | None = None
    # The current texts of deliveries (closings a reply carries), by id.
    delivery_texts: Callable[[tuple[str, ...]], dict[str, str]] | None = None
    # Whether an operation of the session waits for the caller's yes or no.
    awaiting_confirmation: Callable[[str], bool] | None = None
    # Inter-digit pause that ends a DTMF entry without `#`.
    dtmf_pause_ms: int = 2000
    # Agent audio sent ahead of the playout model (0: the whole reply at once).
    playout_lead_ms: int = 160
    floor: FloorConfig = field(default_factory=FloorConfig)


@dataclass
class _Pending:
    settled: asyncio.Future[Settled]
    task: asyncio.Task[None] | None = None


class Call:
    """One phone call attached to one session."""

    def __init__(
        self,
        websocket: WebSocket,
        session: SessionState,
        stream_sid: str,
        call_sid: str,
        ports: SpeechPorts,
    ) -> None:
        self.ws = websocket
        self.session = session
        self.session_id = session.session_id
        self.stream_sid = stream_sid
        self.connection_id = f"call_{call_sid}"
        self.ports = ports
        self.ledger = PlaybackLedger()
        self.vad = VoiceActivity(ports.vad)
        self.splitter = FrameSplitter(PCM_FRAME_BYTES)
        self.rejected: dict[str, int] = {}
        self.clears = 0
        self._t0 = time.monotonic()
        self._stream_ms = 0
        self._frame_wall: deque[tuple[int, float]] = deque(maxlen=_WALL_FRAMES)
        self._pending: dict[str, _Pending] = {}
        self._speak_lock = asyncio.Lock()
        self._send_lock = asyncio.Lock()
        self._records: asyncio.Queue[Callable[[], Awaitable[Any]] | None] = asyncio.Queue()
        self._recorder = asyncio.create_task(self._record_loop())
        self._recognizer: Recognizer | None = None
        # Audio just before VAD confirmed speech: the recognizer must hear the first syllable.
        self._preroll: deque[bytes] = deque(maxlen=_PREROLL_FRAMES)
        self._turn_task: asyncio.Task[None] | None = None
        self._cancelled_turns: set[asyncio.Task[None]] = set()
        self.closed = False
        self._generation = 0
        self.last_barge_in_s: float | None = None
        # Cut by a barge-in whose verdict (real or false) is not known yet.
        self._suspended: list[Settled] = []
        self._verdict: asyncio.Task[None] | None = None
        self._resumes: set[asyncio.Task[None]] = set()
        self._digits = ""
        self._dtmf_turns = 0
        self._dtmf_timer: asyncio.Task[None] | None = None
        # Closed while a suspected barge-in is being checked: nothing more is sent, nothing
        # is flushed, so a false alarm costs at most a short gap and repeats nothing.
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.held_since: float | None = None
        self.false_alarms = 0
        # A request heard with doubt, waiting for the caller's yes or no.
        self._doubt: str | None = None
        self._heard_turns = 0

    # ------------------------------------------------------------------ clocks

    def now_ms(self) -> int:
        """Wall milliseconds since the call started: the phone plays in real time."""
        return int((time.monotonic() - self._t0) * 1000)

    # ------------------------------------------------------------------ recording

    def record(self, make: Callable[[], Awaitable[Any]]) -> None:
        """Queue a write to the bus; writes keep their order and never block the audio."""
        self._records.put_nowait(make)

    async def _record_loop(self) -> None:
        while (make := await self._records.get()) is not None:
            try:
                await make()
            except Exception:
                log.exception("call %s: could not record an event", self.connection_id)

    def interaction(self, event: InteractionEvent, **ids: Any) -> None:
        """Record an interaction event of this call's session."""
        self.record(lambda: self.ports.record(self.session_id, event, **ids))

    def control(self, event: ControlEvent, **ids: Any) -> None:
        """Record a control event of this call's session."""
        self.record(lambda: self.ports.append_control(self.session_id, event, **ids))

    async def drain(self) -> None:
        """Finish every queued write."""
        self._records.put_nowait(None)
        await self._recorder

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
        if event.kind == "suspected":
            actions = tt.on_suspected(playing=self.ledger.active, flowing=self._flowing.is_set())
            voiced_wall = self._wall_of(event.first_voiced_ms + 20)
        elif event.kind == "rejected":
            actions = tt.on_rejected(flowing=self._flowing.is_set())
            voiced_wall = 0.0
        elif event.kind == "started":
            actions = tt.on_started(
                playing=self.ledger.active,
                replying=self._turn_task is not None,
                verdict_pending=self._verdict is not None,
                recognizing=self.ports.stt is not None,
            )
            voiced_wall = self._wall_of(event.first_voiced_ms + 20)
        else:
            self.interaction(SpeechStopped(stream_ms=event.at_ms))
            await self._on_ended()
            return
        for action in actions:
            await self._apply(action, voiced_wall)
        if event.kind == "started":
            self.interaction(SpeechStarted(stream_ms=event.first_voiced_ms))

    async def _on_ended(self) -> None:
        recognizer, self._recognizer = self._recognizer, None
        text = (await final_text(recognizer)).strip() if recognizer is not None else ""
        words = heard_words(recognizer, text) if recognizer is not None else []
        actions = tt.on_ended(
            text,
            suspended=bool(self._suspended),
            cut_reply=bool(self._cancelled_turns),
            doubt_pending=self._doubt is not None,
            can_turn=self.ports.turn is not None,
            floor=self.ports.floor,
        )
        for action in actions:
            if isinstance(action, tt.RunTurn):
                review = self._reviewer(action.text, words)
                self._turn_task = asyncio.create_task(self._turn(action.text, review=review))
            else:
                await self._apply(action, 0.0)

    async def _apply(self, action: tt.Action, voiced_wall: float) -> None:
        """Carry out one decision of `turn_taking`."""
        match action:
            case tt.Hold():
                self._flowing.clear()
                self.held_since = voiced_wall
            case tt.CountFalseAlarm():
                self.false_alarms += 1
            case tt.Release():
                self._release()
            case tt.CancelVerdict():
                if self._verdict is not None:
                    self._verdict.cancel()
                    self._verdict = None
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
                self._resume_suspended()
            case tt.SettleSuspended(reason=reason):
                self._settle_suspended(reason)
            case tt.AwaitFalseInterruption():
                self._verdict = asyncio.create_task(self._await_false_interruption())
            case tt.AnswerDoubt(yes=yes):
                self._answer_doubt(yes)
            case tt.DropDoubt():
                self._doubt = None
            case tt.RunTurn(text=text):
                self._turn_task = asyncio.create_task(self._turn(text, review=None))

    def _reviewer(self, text: str, words: list[Word]) -> Review:
        """Before admission: calls built on doubtful words are held and the caller asked."""
        known = known_values(self.ports.stt)

        def review(calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
            if not doubtful_values(calls, words, known, self.ports.floor):
                return None
            self._doubt = text
            return question(calls, words)

        return review

    def _answer_doubt(self, yes: bool) -> None:
        """The caller's yes/no to "did you say ...?": the request runs as heard, or not."""
        text, self._doubt = self._doubt, None
        if text is None:
            return
        self._heard_turns += 1
        if yes:
            client_turn_id = f"heard-{self.connection_id}-{self._heard_turns}"
            self._turn_task = asyncio.create_task(self._turn(text, client_turn_id))
            return
        task = asyncio.create_task(self._say_line(_NOT_DONE))
        self._resumes.add(task)
        task.add_done_callback(self._resumes.discard)

    def _release(self) -> None:
        """Sending may go on (a false alarm, or the barge-in already flushed the line)."""
        self.held_since = None
        self._flowing.set()

    async def barge_in(self, first_voiced_wall: float) -> None:
        """The user spoke over the agent: stop the voice now, then record what was heard."""
        settled: list[Settled] = []
        self._generation += 1
        if self.ledger.active:
            await self._send({"event": "clear", "streamSid": self.stream_sid})
            self.clears += 1
            self.last_barge_in_s = time.perf_counter() - first_voiced_wall
            metrics.BARGE_IN.observe(self.last_barge_in_s)
            settled = self.ledger.clear(self.now_ms(), "barge_in")
        turn = self._turn_task
        if turn is not None and not turn.done():
            # The reply is not said; the turn's admission (business) still completes.
            self._cancelled_turns.add(turn)
        for item in settled:
            if self._resumable(item):
                self._suspend(item)
            else:
                self._settle(item)
        played = sum(s.played_ms for s in settled)
        unheard = sum(s.unheard_ms for s in settled)
        first = settled[0].utterance if settled else None
        self.control(
            BargeIn(played_ms=played, unheard_ms=unheard),
            playback_id=first.playback_id if first else None,
            response_id=first.response_id if first else None,
            delivery_id=first.delivery_id if first else None,
        )

    def _resumable(self, item: Settled) -> bool:
        return tt.resumable(
            item.utterance.playback_id,
            recognizing=self.ports.stt is not None,
            false_interruption_ms=self.ports.vad.false_interruption_ms,
        )

    def _suspend(self, item: Settled) -> None:
        """Flushed audio (recorded now); its outcome waits for the interruption's verdict."""
        pending = self._pending.get(item.utterance.playback_id)
        if pending is not None and pending.task is not None and not pending.task.done():
            pending.task.cancel()
        self._record_finished(item)
        self._suspended.append(item)

    def _settle_suspended(self, reason: str) -> None:
        """The interruption was real (or the call ended): what was cut stays unheard."""
        suspended, self._suspended = self._suspended, []
        for item in suspended:
            self._resolve(
                Settled(item.utterance, heard=False, played_ms=item.played_ms, reason=reason)
            )

    async def _say_line(self, text: str) -> None:
        await self.say(text, f"line-{self.connection_id}-{self._heard_turns}")

    async def _await_false_interruption(self) -> None:
        await asyncio.sleep(self.ports.vad.false_interruption_ms / 1000)
        self._verdict = None
        self._resume_suspended()

    def _resume_suspended(self) -> None:
        """The interruption was not a turn: what it cut goes on from its first unheard word."""
        # Not a turn: the generation that was cut can still answer.
        self._cancelled_turns.clear()
        if self.closed or not self._suspended:
            return
        suspended, self._suspended = self._suspended, []
        for item in suspended:
            task = asyncio.create_task(self._resume(item))
            self._resumes.add(task)
            task.add_done_callback(self._resumes.discard)

    async def _resume(self, item: Settled) -> None:
        """Say the unheard rest; the cut utterance is heard only if the rest is."""
        u = item.utterance
        plan = tt.plan_resume(u.text, item.heard_text, u.playback_id)
        if isinstance(plan, tt.HeardAll):
            self._resolve(Settled(u, heard=True, played_ms=u.duration_ms, reason="played_out"))
            return
        try:
            after = await self.say(
                plan.text, plan.playback_id,
                delivery_id=u.delivery_id, response_id=u.response_id, turn_id=u.turn_id,
            )
        except Exception:
            log.exception("call %s: resuming %s failed", self.connection_id, u.playback_id)
            after = Settled(u, heard=False, played_ms=0, reason="resume_failed")
        played = tt.resumed_played_ms(u.duration_ms, item.played_ms, rest_heard=after.heard)
        self._resolve(Settled(u, heard=after.heard, played_ms=played, reason="resumed"))

    def on_mark(self, name: str) -> None:
        """A mark came back from the phone."""
        settled = self.ledger.on_mark(name, self.now_ms())
        if settled is not None:
            self._settle(settled)

    def _settle(self, item: Settled) -> None:
        self._resolve(item)
        self._record_finished(item)

    def _resolve(self, item: Settled) -> None:
        """Answer whoever waits on the utterance (`say`)."""
        pending = self._pending.pop(item.utterance.playback_id, None)
        if pending is not None:
            if pending.task is not None and not pending.task.done():
                pending.task.cancel()
            if not pending.settled.done():
                pending.settled.set_result(item)

    def _record_finished(self, item: Settled) -> None:
        u = item.utterance
        if not item.heard:
            metrics.CANCELLED_UNHEARD_AUDIO.observe(item.unheard_ms / 1000)
        self.interaction(
            PlaybackFinished(
                heard=item.heard, played_ms=item.played_ms, unheard_ms=item.unheard_ms
            ),
            playback_id=u.playback_id,
            delivery_id=u.delivery_id,
            response_id=u.response_id,
            turn_id=u.turn_id,
        )

    # ------------------------------------------------------------------ DTMF

    def on_dtmf(self, digit: str) -> None:
        """A key press: yes/no to a pending confirmation, else part of a typed entry."""
        if self.ports.turn is None:
            return
        if self._dtmf_timer is not None:
            self._dtmf_timer.cancel()
            self._dtmf_timer = None
        awaiting = self.ports.awaiting_confirmation
        # Asked only when the key could be an answer to it.
        confirming = (
            not self._digits and digit in ("1", "2") and self._doubt is None
            and awaiting is not None and awaiting(self.session_id)
        )
        self._digits, action = dtmf.press(
            self._digits, digit, doubt_pending=self._doubt is not None,
            awaiting_confirmation=confirming,
        )
        self._on_keys(action)

    def _on_keys(self, action: dtmf.DtmfAction) -> None:
        match action:
            case dtmf.AnswerDoubt(yes=yes):
                self._answer_doubt(yes)
            case dtmf.Turn(text=text):
                self._dtmf_turn(text)
            case dtmf.Collect():
                self._dtmf_timer = asyncio.create_task(self._dtmf_pause())
            case None:
                pass

    async def _dtmf_pause(self) -> None:
        await asyncio.sleep(self.ports.dtmf_pause_ms / 1000)
        self._dtmf_timer = None
        self._digits, action = dtmf.pause(self._digits)
        self._on_keys(action)

    def _dtmf_turn(self, text: str) -> None:
        self._dtmf_turns += 1
        client_turn_id = f"dtmf-{self.connection_id}-{self._dtmf_turns}"
        self._turn_task = asyncio.create_task(self._turn(text, client_turn_id))

    # ------------------------------------------------------------------ outbound

    async def _send(self, message: dict[str, Any]) -> None:
        if self.closed:
            return
        async with self._send_lock:
            with contextlib.suppress(WebSocketDisconnect, RuntimeError):
                await self.ws.send_text(msgspec.json.encode(message).decode())

    async def say(
        self, text: str, playback_id: str, *, interrupt: bool = False, **ids: str | None
    ) -> Settled:
        """Speak `text`; the answer says whether it was heard, and how much of it played."""
        if interrupt and self.ledger.active:
            await self._send({"event": "clear", "streamSid": self.stream_sid})
            self.clears += 1
            for item in self.ledger.clear(self.now_ms(), "urgent_interrupt"):
                self._settle(item)
        loop = asyncio.get_running_loop()
        pending = _Pending(loop.create_future())
        self._pending[playback_id] = pending
        generation = self._generation
        async with self._speak_lock:
            if self.closed:
                return self._abandon(playback_id, text, "call_ended", **ids)
            if generation != self._generation:
                # Queued behind audio that a barge-in cut: the caller moved on.
                return self._abandon(playback_id, text, "barge_in", **ids)
            if not interrupt and playback_id == ids.get("delivery_id") and self.vad.speaking:
                # The policy decided on a view that had not yet seen the caller start talking;
                # this call hears them now, and only an urgent closing talks over a caller.
                return self._abandon(playback_id, text, "user_speaking", **ids)
            self.ledger.begin(playback_id, text, self.now_ms(), **ids)
            pending.task = asyncio.create_task(self._stream(playback_id, text, ids))
            await asyncio.wait({pending.task})
            if not pending.task.cancelled() and pending.task.exception() is not None:
                log.error("call %s: TTS failed: %r", self.connection_id, pending.task.exception())
                dropped = self.ledger.drop(playback_id, self.now_ms(), "tts_failed")
                if dropped is not None:
                    self._settle(dropped)
        return await pending.settled

    def _abandon(self, playback_id: str, text: str, reason: str, **ids: str | None) -> Settled:
        self._pending.pop(playback_id, None)
        self.ledger.begin(playback_id, text, self.now_ms(), **ids)
        dropped = self.ledger.drop(playback_id, self.now_ms(), reason)
        assert dropped is not None
        return dropped

    async def _stream(self, playback_id: str, text: str, ids: dict[str, str | None]) -> None:
        """Synthesis runs ahead into a queue; sending follows the playout pace."""
        pieces: asyncio.Queue[bytes | None] = asyncio.Queue()
        producer = asyncio.create_task(self._synthesize(playback_id, text, ids, pieces))
        try:
            while (piece := await pieces.get()) is not None:
                await self._pace()
                await self._send(
                    {
                        "event": "media",
                        "streamSid": self.stream_sid,
                        "media": {"payload": base64.b64encode(piece).decode()},
                    }
                )
                self.ledger.add_audio(playback_id, ulaw_ms(piece), self.now_ms())
            # A failed synthesis raises here: no mark for audio that never finished.
            await producer
        finally:
            if not producer.done():
                producer.cancel()
        await self._send(
            {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": playback_id}}
        )
        self.ledger.sent(playback_id)

    async def _synthesize(
        self,
        playback_id: str,
        text: str,
        ids: dict[str, str | None],
        pieces: asyncio.Queue[bytes | None],
    ) -> None:
        """TTS into media-sized pieces; `playback.started` once the whole length is known
        (the policy sees the agent talking from the start of the utterance)."""
        sent = 0
        try:
            async for chunk in self.ports.tts.stream(text):
                for start in range(0, len(chunk), _MEDIA_BYTES):
                    pieces.put_nowait(chunk[start : start + _MEDIA_BYTES])
                sent += len(chunk)
            self.interaction(
                PlaybackStarted(text=text, duration_ms=ulaw_ms(sent)),
                playback_id=playback_id, **ids,
            )
        finally:
            pieces.put_nowait(None)

    async def _pace(self) -> None:
        """Wait until the next piece may go: not held, and at most the lead queued ahead.

        Real-time pace with a small lead: a stop (hold or clear) costs at most the lead
        plus one piece, and the playout model stays close to what the phone plays.
        """
        lead = self.ports.playout_lead_ms
        while True:
            await self._flowing.wait()
            ahead = self.ledger.queued_ms(self.now_ms())
            if lead <= 0 or ahead <= lead:
                return
            await asyncio.sleep((ahead - lead) / 1000)

    # ------------------------------------------------------------------ turns

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
            self._doubt = None
            # Generated, never played: history keeps none of it.
            self.control(
                ResponseCancel(reason="barge_in"), turn_id=turn_id, response_id=response_id
            )
            self.interaction(
                ReplyTruncated(text="", played_ms=0, unheard_ms=0),
                turn_id=turn_id,
                response_id=response_id,
            )
            if self.ports.settle_attached is not None and attached:
                await self.ports.settle_attached(
                    self.session_id,
                    attached,
                    self._abandon(
                        response_id, reply, "barge_in", turn_id=turn_id, response_id=response_id
                    ),
                )
            return
        if self._turn_task is task:
            self._turn_task = None
        settled = await self.say(reply, response_id, turn_id=turn_id, response_id=response_id)
        if not settled.heard:
            texts = self.ports.delivery_texts(attached) if self.ports.delivery_texts else {}
            self.interaction(
                ReplyTruncated(
                    text=settled.heard_text,
                    played_ms=settled.played_ms,
                    unheard_ms=settled.unheard_ms,
                    unheard_delivery_ids=tuple(
                        d for d in attached if not carried_heard(texts.get(d, ""), settled)
                    ),
                ),
                turn_id=turn_id,
                response_id=response_id,
            )
        if self.ports.settle_attached is not None and attached:
            await self.ports.settle_attached(self.session_id, attached, settled)

    # ------------------------------------------------------------------ end

    async def hang_up(self, reason: str) -> None:
        """The call ended: pending audio was not heard; pending deliveries stay pending.

        `channel.disconnected` is stored before any delivery is settled unheard, so the
        policy never re-decides a delivery while it still believes the call is there.
        """
        self.closed = True
        self._flowing.set()
        recorded = asyncio.Event()

        async def disconnected() -> None:
            try:
                await self.ports.record(
                    self.session_id,
                    ChannelDisconnected(
                        channel="voice", connection_id=self.connection_id, reason=reason
                    ),
                )
            finally:
                recorded.set()

        self.record(disconnected)
        await recorded.wait()
        for timer in (self._verdict, self._dtmf_timer):
            if timer is not None:
                timer.cancel()
        for item in self.ledger.clear(self.now_ms(), reason):
            self._settle(item)
        self._settle_suspended(reason)
        for pending in list(self._pending.values()):
            if pending.task is not None and not pending.task.done():
                pending.task.cancel()
        if self._turn_task is not None and not self._turn_task.done():
            self._cancelled_turns.add(self._turn_task)
        CALLS.labels(outcome=reason).inc()
        await self.drain()


@dataclass
class CallRegistry:
    """The calls attached to this process, by session (the latest call wins)."""

    calls: dict[str, Call] = field(default_factory=dict)

    def get(self, session_id: str) -> Call | None:
        """The live call of a session, if this process holds one."""
        call = self.calls.get(session_id)
        return call if call is not None and not call.closed else None

    def attach(self, call: Call) -> None:
        """A call starts carrying its session's voice."""
        self.calls[call.session_id] = call

    def detach(self, call: Call) -> None:
        """The call ended."""
        if self.calls.get(call.session_id) is call:
            del self.calls[call.session_id]


# ---------------------------------------------------------------------- routes
