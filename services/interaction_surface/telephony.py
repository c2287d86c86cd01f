"""Twilio Media Streams: `POST /v1/telephony/twilio/voice` (TwiML) and `WS /v1/telephony/twilio`.

The edge is tolerant: unknown fields are ignored, `sequenceNumber` is optional, numbers
may arrive as strings, and a bad frame (garbage JSON, invalid base64, media before
`start`) is counted with its reason and dropped, never fatal. `start.customParameters`
`{session_id, token}` continues a session; `{user_id, tenant_id}` opens one. While the
call is attached, the session's deliveries are spoken on it (`Call.say`).

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

DTMF: a key press is caller input. During a pending confirmation `1` means yes and `2`
means no; any other digits are collected until `#` or a pause and become the turn's text.
Either way the call runs a turn recorded as `turn.received` (channel voice) whose
`client_turn_id` is `dtmf-<call>-<n>`, so the key press is visible and never applied twice.

Several surface processes share the streams; a call lives in exactly one of them. Its
owner is a KV key per call (`CallOwnership`), refreshed while the call lasts in a bucket
whose entries expire, so a process killed mid-call stops owning its calls within one TTL.

Backchannels and doubtful hearings are decided in `floor` (pure); the call applies them:
an acknowledgement over the agent resumes what it cut, and a voice turn's calls built on
doubtful words wait for the caller's yes (`_reviewer`, `_answer_doubt`).

Trust (signatures, call tickets, the local-only rule without an auth token) is in
`twilio_trust`; the routes here apply it before anything is stored.

Long because one call is one state machine (inbound audio, playout, barge-in, resumes,
DTMF, turns) whose parts share its state; the pure decisions live in `vad`, `playback` and
`floor`, and the planned `voice/` package split divides the shell.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from xml.sax.saxutils import quoteattr

import msgspec
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from libs import metrics
from libs.bus import append
from libs.domain import SessionState
from libs.events import (
    CONTROL,
    Backchannel,
    BargeIn,
    ChannelConnected,
    ChannelDisconnected,
    ControlEvent,
    Envelope,
    InteractionEvent,
    PlaybackFinished,
    PlaybackStarted,
    ReplyTruncated,
    ResponseCancel,
    SessionOpened,
    SpeechStarted,
    SpeechStopped,
)
from libs.problems import problem

from .auth import hash_token, new_id, new_token
from .codec import PCM_FRAME_BYTES, FrameSplitter, ulaw_ms, ulaw_to_pcm16
from .floor import FloorConfig, Word, answer_of, doubtful_values, is_backchannel, question
from .playback import PlaybackLedger, Settled, carried_heard, unheard_rest
from .speech import (
    Recognizer,
    SpeechToText,
    TextToSpeech,
    final_text,
    heard_words,
    known_values,
)
from .twilio_trust import (
    SETTINGS_HEADER,
    SIGNATURE_HEADER,
    TICKET,
    TicketRefused,
    TrustSettings,
    check_ticket,
    compute_signature,
    form_pairs,
    is_local,
    issue_ticket,
    public_url,
    stream_url,
    text_params,
)
from .vad import VadConfig, VadEvent, VoiceActivity

log = logging.getLogger(__name__)

FRAMES_REJECTED = metrics.TELEPHONY_FRAMES_REJECTED
CALLS = metrics.TELEPHONY_CALLS

_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# The largest text frame read from a phone stream; a bigger one closes the stream (1009).
_MAX_FRAME_CHARS = 64 * 1024
# Outbound media message size: 40 ms of μ-law, so paced sending stops within 40 ms.
_MEDIA_BYTES = 320
_WALL_FRAMES = 256
# Speech is confirmed up to the VAD's confirm window after its first voiced frame: the
# recognizer still gets the first syllable.
_PREROLL_FRAMES = 25
# A resumed rest that is cut and proves false again resumes at most this many times.
_MAX_RESUMES = 2
_RESUME = ".resume"
# Said when the caller answers "no" to "did you say ...?".
_NOT_DONE = "Okay, I have not done anything. Please say it again, or press the keys."
# Looks at a voice turn's proposed calls before admission (see `floor.doubtful_values`).
Review = Callable[[Sequence[tuple[str, Mapping[str, Any]]]], str | None]


# The voice webhook's form is about a kilobyte; past this it is refused (413).
_MAX_WEBHOOK_BYTES = 64 * 1024
STREAM_PATH = "/v1/telephony/twilio"


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """Twilio's X-Twilio-Signature: base64 HMAC-SHA1 of the URL + sorted POST params."""
    return compute_signature(auth_token, url, list(params.items()))


def signature_ok(auth_token: str, url: str, params: dict[str, str], presented: str | None) -> bool:
    """Whether the presented signature is Twilio's for this request (either port form)."""
    return TrustSettings(auth_token=auth_token).verify(url, list(params.items()), presented)


def _now() -> datetime:
    return datetime.now(UTC)


def _text(value: Any) -> str | None:
    """A string field that may arrive as a number."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return None


class FrameError(Exception):
    """A frame that cannot be used; `reason` is the stable code recorded for it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_frame(raw: str) -> tuple[str, dict[str, Any]]:
    """The event name and the whole message, or FrameError."""
    try:
        message = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        raise FrameError("malformed_json") from None
    if not isinstance(message, dict):
        raise FrameError("not_an_object")
    event = _text(message.get("event"))
    if not event:
        raise FrameError("missing_event")
    return event, message


def media_payload(message: dict[str, Any]) -> bytes:
    """The μ-law bytes of a `media` message, or FrameError."""
    media = message.get("media")
    payload = media.get("payload") if isinstance(media, dict) else None
    if not isinstance(payload, str):
        raise FrameError("missing_payload")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise FrameError("invalid_base64") from None


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
        if event.kind == "suspected":
            if self.ledger.active and self._flowing.is_set():
                self._flowing.clear()
                self.held_since = self._wall_of(event.first_voiced_ms + 20)
            return
        if event.kind == "rejected":
            if not self._flowing.is_set():
                self.false_alarms += 1
                self._release()
            return
        if event.kind == "started":
            if self._verdict is not None:
                # More speech before the window ended: its own end decides.
                self._verdict.cancel()
                self._verdict = None
            if self.ledger.active or self._turn_task is not None:
                await self.barge_in(self._wall_of(event.first_voiced_ms + 20))
            self._release()
            if self.ports.stt is not None:
                self._recognizer = self.ports.stt.session()
                for earlier in self._preroll:
                    self._recognizer.feed(earlier)
            self.interaction(SpeechStarted(stream_ms=event.first_voiced_ms))
            return
        self.interaction(SpeechStopped(stream_ms=event.at_ms))
        recognizer, self._recognizer = self._recognizer, None
        text = (await final_text(recognizer)).strip() if recognizer is not None else ""
        words = heard_words(recognizer, text) if recognizer is not None else []
        floor = self.ports.floor
        if (self._suspended or self._cancelled_turns) and is_backchannel(text, floor):
            # "Mm-hmm" over the agent: an acknowledgement, not a turn.
            self.control(Backchannel(text=text, continued=floor.continue_on_backchannel))
            if floor.continue_on_backchannel:
                self._resume_suspended()
                return
        if self._suspended:
            if text:
                self._settle_suspended("barge_in")
            else:
                self._verdict = asyncio.create_task(self._await_false_interruption())
        if text and self.ports.turn is not None:
            if self._doubt is not None:
                answer = answer_of(text)
                if answer is not None:
                    self._answer_doubt(answer)
                    return
                # Something else: a new request replaces the doubtful one.
                self._doubt = None
            review = self._reviewer(text, words)
            self._turn_task = asyncio.create_task(self._turn(text, review=review))

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
        return (
            self.ports.stt is not None
            and self.ports.vad.false_interruption_ms > 0
            and item.utterance.playback_id.count(_RESUME) < _MAX_RESUMES
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
        rest = unheard_rest(u.text, item.heard_text)
        if not rest:
            self._resolve(Settled(u, heard=True, played_ms=u.duration_ms, reason="played_out"))
            return
        playback_id = f"{u.playback_id}{_RESUME}{u.playback_id.count(_RESUME) + 1}"
        try:
            after = await self.say(
                rest, playback_id,
                delivery_id=u.delivery_id, response_id=u.response_id, turn_id=u.turn_id,
            )
        except Exception:
            log.exception("call %s: resuming %s failed", self.connection_id, u.playback_id)
            after = Settled(u, heard=False, played_ms=0, reason="resume_failed")
        played = u.duration_ms if after.heard else min(u.duration_ms, item.played_ms)
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
        if not self._digits and digit in "12" and self._doubt is not None:
            self._answer_doubt(digit == "1")
            return
        awaiting = self.ports.awaiting_confirmation
        if not self._digits and digit in "12" and awaiting and awaiting(self.session_id):
            self._dtmf_turn("yes" if digit == "1" else "no")
            return
        if digit == "#":
            entry, self._digits = self._digits, ""
            if entry:
                self._dtmf_turn(entry)
            return
        self._digits = (self._digits + digit)[-32:]
        self._dtmf_timer = asyncio.create_task(self._dtmf_pause())

    async def _dtmf_pause(self) -> None:
        await asyncio.sleep(self.ports.dtmf_pause_ms / 1000)
        self._dtmf_timer = None
        entry, self._digits = self._digits, ""
        if entry:
            self._dtmf_turn(entry)

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


class CallOwnership:
    """Which surface process holds each live call: `<connection id>` → owner, in a KV
    bucket whose entries expire after `ttl_s` unless the owner refreshes them."""

    def __init__(self, kv: KeyValue, owner: str, ttl_s: float) -> None:
        self.kv = kv
        self.owner = owner
        self.ttl_s = ttl_s
        self._held: set[str] = set()
        self._beat: asyncio.Task[None] | None = None

    async def claim(self, connection_id: str) -> None:
        """This process carries the call (the latest attachment of a call id wins)."""
        self._held.add(connection_id)
        await self.kv.put(connection_id, self.owner.encode())
        if self._beat is None or self._beat.done():
            self._beat = asyncio.create_task(self._heartbeat())

    async def release(self, connection_id: str) -> None:
        """The call ended here."""
        self._held.discard(connection_id)
        with contextlib.suppress(Exception):
            entry = await self.kv.get(connection_id)
            if entry.value == self.owner.encode():
                await self.kv.delete(connection_id)

    async def owner_of(self, connection_id: str) -> str | None:
        """The live owner of a call, or None when nobody refreshes it any more."""
        try:
            entry = await self.kv.get(connection_id)
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def _heartbeat(self) -> None:
        while self._held:
            await asyncio.sleep(self.ttl_s / 3)
            for connection_id in list(self._held):
                try:
                    await self.kv.put(connection_id, self.owner.encode())
                except Exception:
                    log.exception("call %s: ownership not refreshed", connection_id)

    async def close(self) -> None:
        """Stop refreshing (the keys then expire)."""
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat


@dataclass
class CallRegistry:
    """The calls attached to this process, by session (the latest call wins)."""

    calls: dict[str, Call] = field(default_factory=dict)
    # Called with every call that attaches (the delivery executor watches its session).
    on_attach: list[Callable[[Call], None]] = field(default_factory=list)

    def get(self, session_id: str) -> Call | None:
        """The live call of a session, if this process holds one."""
        call = self.calls.get(session_id)
        return call if call is not None and not call.closed else None

    def attach(self, call: Call) -> None:
        """A call starts carrying its session's voice."""
        self.calls[call.session_id] = call
        for hook in self.on_attach:
            hook(call)

    def detach(self, call: Call) -> None:
        """The call ended."""
        if self.calls.get(call.session_id) is call:
            del self.calls[call.session_id]


# ---------------------------------------------------------------------- routes


SessionLookup = Callable[[str, str | None], Awaitable[SessionState]]


@dataclass
class Telephony:
    """The routes' dependencies."""

    registry: CallRegistry
    ports: SpeechPorts | None
    find_session: SessionLookup
    open_session: Callable[[str, str], Awaitable[SessionState]]
    default_tenant: str = "default"
    trust: TrustSettings = field(default_factory=TrustSettings)
    ownership: CallOwnership | None = None
    # Create-once claims of used call tickets (a replay fails on every surface).
    tickets: KeyValue | None = None
    clock: Callable[[], float] = time.time
    # The periodic sweep of calls whose owner died (see `deliveries`).
    sweeper: asyncio.Task[None] | None = None


def _caller_id(raw: str | None) -> str | None:
    if not raw:
        return None
    digits = re.sub(r"[^A-Za-z0-9_.-]", "", raw)
    return f"tel-{digits}"[:64] if digits else None


class StreamRefused(Exception):
    """A `start` that opens nothing: closed with `code`, counted under `reason`."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


_unsafe_stream_url_logged = False


async def _webhook_form(request: Request) -> list[tuple[str, str]] | Response:
    """Every (key, value) of the webhook's form, or the problem answer for a bad body."""
    size = 0
    chunks: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > _MAX_WEBHOOK_BYTES:
            return problem(413, "Payload too large", f"the form exceeds {_MAX_WEBHOOK_BYTES} bytes")
        chunks.append(chunk)
    try:
        return form_pairs(b"".join(chunks))
    except UnicodeDecodeError:
        return problem(400, "Bad request", "the form is not UTF-8")


def _stream_parameters(
    telephony: Telephony, query: Any, form: dict[str, str]
) -> dict[str, str] | Response:
    """The `<Parameter>`s of the TwiML: a session to continue, or the caller to open one."""
    if query.get("session_id") or query.get("token"):
        session_id, token = query.get("session_id", ""), query.get("token", "")
        if not _ID.match(session_id) or not token or len(token) > 128:
            return problem(400, "Bad request", "session_id and token must both be valid")
        return {"session_id": session_id, "token": token}
    user = query.get("user_id") or _caller_id(form.get("From")) or "caller"
    tenant = query.get("tenant_id") or telephony.default_tenant
    if not _ID.match(user) or not _ID.match(tenant):
        return problem(400, "Bad request", "user_id and tenant_id must be ids of 1-64 characters")
    return {"user_id": user, "tenant_id": tenant}


def build_telephony_router(telephony: Telephony) -> APIRouter:
    """`POST /v1/telephony/twilio/voice` and `WS /v1/telephony/twilio`."""
    router = APIRouter()

    @router.post("/v1/telephony/twilio/voice")
    async def voice(request: Request) -> Response:
        global _unsafe_stream_url_logged  # noqa: PLW0603 - one log line per process
        pairs = await _webhook_form(request)
        if isinstance(pairs, Response):
            return pairs
        trust = telephony.trust
        peer = request.client.host if request.client else None
        url = public_url(trust, str(request.url), peer, request.headers)
        if trust.signed:
            signature = request.headers.get(SIGNATURE_HEADER)
            if not trust.verify(url, pairs, signature, request.headers.get(SETTINGS_HEADER)):
                # The query may carry a session token: only the origin and path are logged.
                log.warning(
                    "telephony: voice webhook refused: no valid signature for %s",
                    url.split("?", 1)[0],
                )
                return problem(403, "Forbidden", "bad Twilio signature")
        elif not is_local(peer, request.headers):
            return problem(
                403, "Forbidden", "TWILIO_AUTH_TOKEN is not set: only local requests are served"
            )
        form = dict(pairs)
        custom = _stream_parameters(telephony, request.query_params, form)
        if isinstance(custom, Response):
            return custom
        if trust.signed:
            call_sid = form.get("CallSid", "")
            if not call_sid:
                return problem(400, "Bad request", "the form has no CallSid")
            custom[TICKET] = issue_ticket(
                trust.ticket_key, call_sid, custom, now=telephony.clock(), ttl_s=trust.ticket_ttl_s
            )
        target = stream_url(url, STREAM_PATH)
        unsafe = target.startswith("ws://") and not is_local(peer, request.headers)
        if unsafe and not _unsafe_stream_url_logged:
            _unsafe_stream_url_logged = True
            log.warning(
                "telephony: the TwiML points the stream at %s; Twilio only connects to "
                "wss:// (set HOLDLINE_PUBLIC_URL or HOLDLINE_TRUSTED_PROXIES)", target
            )
        parameters = "".join(
            f"<Parameter name={quoteattr(k)} value={quoteattr(v)}/>" for k, v in custom.items()
        )
        twiml = (
            '<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f"<Stream url={quoteattr(target)}>{parameters}</Stream>"
            "</Connect></Response>"
        )
        return Response(twiml, media_type="application/xml")

    @router.websocket(STREAM_PATH)
    async def stream(websocket: WebSocket) -> None:
        trust = telephony.trust
        peer = websocket.client.host if websocket.client else None
        if trust.signed:
            url = public_url(trust, str(websocket.url), peer, websocket.headers)
            signature = websocket.headers.get(SIGNATURE_HEADER)
            if not trust.verify(url, [], signature, websocket.headers.get(SETTINGS_HEADER)):
                log.warning(
                    "telephony: stream refused: no valid signature for %s", url.split("?", 1)[0]
                )
                await websocket.close(code=4403)
                return
        await websocket.accept()
        await _run_stream(telephony, websocket, local=is_local(peer, websocket.headers))

    return router


@dataclass
class _Stream:
    """One WebSocket's progress: the call once `start` arrived, and how it ended."""

    telephony: Telephony
    websocket: WebSocket
    # A loopback peer with no proxy in between (may open sessions without an auth token).
    local: bool = False
    call: Call | None = None
    early: dict[str, int] = field(default_factory=dict)
    refused: int = 4404

    def reject(self, reason: str) -> None:
        if self.call is not None:
            self.call.reject(reason)
            return
        self.early[reason] = self.early.get(reason, 0) + 1
        FRAMES_REJECTED.labels(reason=reason).inc()
        log.warning("telephony: frame dropped before start (%s)", reason)

    async def handle(self, raw: str) -> str | None:
        """One text frame; returns why the stream ends, or None to keep reading."""
        event, frame = parse_frame(raw)
        call = self.call
        if event == "start" and call is None:
            try:
                self.call = await _start(self.telephony, self.websocket, frame, local=self.local)
            except StreamRefused as exc:
                FRAMES_REJECTED.labels(reason=exc.reason).inc()
                log.warning("telephony: start refused (%s), closing %d", exc.reason, exc.code)
                self.refused = exc.code
                return "refused"
            return None
        if event == "stop":
            return "stop"
        if event == "media":
            if call is None:
                raise FrameError("media_before_start")
            await call.on_media(media_payload(frame))
        elif event == "mark":
            mark = frame.get("mark")
            name = _text(mark.get("name")) if isinstance(mark, dict) else None
            if not name:
                raise FrameError("missing_mark_name")
            if call is not None:
                call.on_mark(name)
        elif event == "dtmf":
            dtmf = frame.get("dtmf")
            digit = _text(dtmf.get("digit")) if isinstance(dtmf, dict) else None
            if not digit or len(digit) != 1 or digit not in "0123456789*#":
                raise FrameError("bad_dtmf")
            if call is not None:
                call.on_dtmf(digit)
        elif event not in ("connected", "start"):
            raise FrameError("unknown_event")
        return None


async def _run_stream(telephony: Telephony, websocket: WebSocket, *, local: bool) -> None:
    state = _Stream(telephony, websocket, local=local)
    reason = "disconnected"
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            raw = message.get("text")
            if raw is None:
                state.reject("binary_frame")
                continue
            if len(raw) > _MAX_FRAME_CHARS:
                # Twilio's messages are well under a kilobyte; parsing a huge one (or its
                # audio) would stall every call of this process.
                state.reject("frame_too_large")
                reason = "frame_too_large"
                await websocket.close(code=1009, reason="frame too large")
                break
            try:
                ended = await state.handle(raw)
            except FrameError as exc:
                state.reject(exc.reason)
                continue
            if ended is not None:
                reason = ended
                break
        if reason == "refused":
            await websocket.close(code=state.refused)
        elif reason == "stop":
            # The phone is done: close the stream with a close frame rather than drop it.
            await websocket.close(code=1000)
    except WebSocketDisconnect:
        reason = "disconnected"
    finally:
        call = state.call
        if call is not None:
            for key, count in state.early.items():
                call.rejected[key] = call.rejected.get(key, 0) + count
            telephony.registry.detach(call)
            await call.hang_up(reason)
            if telephony.ownership is not None:
                await telephony.ownership.release(call.connection_id)


async def _claim_ticket(telephony: Telephony, nonce: str) -> None:
    """Use the ticket up, on every surface at once; StreamRefused when it was used before."""
    if telephony.tickets is None:
        raise StreamRefused(4403, "ticket_unverifiable")
    try:
        await telephony.tickets.create(f"t.{nonce}", b"used")
    except KeyWrongLastSequenceError:
        raise StreamRefused(4403, "ticket_replayed") from None
    except Exception as exc:  # noqa: BLE001 - a claim that cannot be made refuses the call
        log.warning("telephony: ticket claim failed: %r", exc)
        raise StreamRefused(4403, "ticket_unverifiable") from None


async def _start(
    telephony: Telephony, websocket: WebSocket, frame: dict[str, Any], *, local: bool
) -> Call:
    """The call a `start` opens, or StreamRefused (before anything is stored)."""
    start = frame.get("start")
    if not isinstance(start, dict) or telephony.ports is None:
        raise FrameError("bad_start")
    params = text_params(start.get("customParameters"))
    if params is None:
        raise StreamRefused(4403, "bad_parameters")
    raw_call_sid = _text(start.get("callSid")) or ""
    stream_sid = _text(start.get("streamSid")) or _text(frame.get("streamSid")) or new_id("MZ")
    call_sid = re.sub(r"[^A-Za-z0-9_-]", "", raw_call_sid)[:64] or new_id("CA")
    trust = telephony.trust
    nonce: str | None = None
    if trust.signed and params.get(TICKET):
        # Present: it must be ours, for this call and exactly these parameters.
        try:
            nonce = check_ticket(
                trust.ticket_key, params[TICKET], raw_call_sid, params, now=telephony.clock()
            )
        except TicketRefused as exc:
            raise StreamRefused(4403, exc.reason) from None
    session: SessionState | None = None
    if params.get("session_id"):
        try:
            session = await telephony.find_session(params["session_id"], params.get("token"))
        except Exception:  # noqa: BLE001 - any lookup failure refuses the call the same way
            session = None
        if session is None or session.closed:
            raise StreamRefused(4404, "unknown_session")
    elif trust.signed and nonce is None:
        raise StreamRefused(4403, "ticket_missing")
    elif not trust.signed and not local:
        raise StreamRefused(4403, "not_local")
    if nonce is not None:
        await _claim_ticket(telephony, nonce)
    if session is None:
        user = params.get("user_id", "")
        tenant = params.get("tenant_id") or telephony.default_tenant
        if not _ID.match(user) or not _ID.match(tenant):
            raise StreamRefused(4404, "bad_caller")
        session = await telephony.open_session(user, tenant)
    call = Call(websocket, session, stream_sid, call_sid, telephony.ports)
    if telephony.ownership is not None:
        await telephony.ownership.claim(call.connection_id)
    telephony.registry.attach(call)
    call.interaction(ChannelConnected(channel="voice", connection_id=call.connection_id))
    CALLS.labels(outcome="started").inc()
    return call


def opened_session_event(user_id: str, tenant_id: str, agent: str) -> SessionOpened:
    """A phone-opened session: its token is never shown, only a later chat could not use it."""
    return SessionOpened(
        user_id=user_id, tenant_id=tenant_id, agent=agent, token_hash=hash_token(new_token())
    )


async def append_control(
    js: Any, topology: Any, session_id: str, event: ControlEvent, **ids: Any
) -> None:
    """Append a control event to the session's control subject."""
    env: Envelope[ControlEvent] = Envelope(
        event_id=new_id("ev"), occurred_at=_now(), session_id=session_id, event=event, **ids
    )
    await append(js, CONTROL, topology.control_subject(session_id), env)
    metrics.EVENTS_PUBLISHED.labels(stream="control").inc()


def telephony_settings() -> TrustSettings:
    """What the edge trusts, from the environment (TelephonyMisconfigured when unusable)."""
    return TrustSettings.from_env()
