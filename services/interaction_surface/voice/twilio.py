"""Twilio Media Streams: `POST /v1/telephony/twilio/voice` (TwiML) and `WS /v1/telephony/twilio`.

The edge is tolerant: unknown fields are ignored, `sequenceNumber` is optional, numbers
may arrive as strings, and a bad frame (garbage JSON, invalid base64, media before
`start`) is counted with its reason and dropped, never fatal. `start.customParameters`
`{session_id, token}` continues a session; `{user_id, tenant_id}` opens one. While the
call is attached, the session's deliveries are spoken on it (`Call.say`, call.py).

Trust (signatures, call tickets, the local-only rule without an auth token) is in
`trust`; the routes here apply it before anything is stored. Who holds a call across
surface processes is `ownership`.

A little over 400 lines because the webhook, the stream loop and the start handshake
share the frame parsing and the refusal codes; splitting them would scatter one protocol.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

import msgspec
from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import Response
from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from libs import metrics
from libs.bus import append
from libs.clock import Clock, Ids
from libs.config import DEFAULT_TIMINGS, BusTimings
from libs.domain import SessionState
from libs.events import (
    CONTROL,
    ChannelConnected,
    ControlEvent,
    Envelope,
    SessionOpened,
)
from libs.problems import problem

from ..auth import hash_token, new_token
from .call import CALLS, FRAMES_REJECTED, Call, CallRegistry, SpeechPorts
from .ownership import CallOwnership
from .settings import VoiceSettings
from .trust import (
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

log = logging.getLogger(__name__)

_ID = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# The largest text frame read from a phone stream; a bigger one closes the stream (1009).
_MAX_FRAME_CHARS = 64 * 1024

# The voice webhook's form is about a kilobyte; past this it is refused (413).
_MAX_WEBHOOK_BYTES = 64 * 1024
STREAM_PATH = "/v1/telephony/twilio"


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """Twilio's X-Twilio-Signature: base64 HMAC-SHA1 of the URL + sorted POST params."""
    return compute_signature(auth_token, url, list(params.items()))


def signature_ok(auth_token: str, url: str, params: dict[str, str], presented: str | None) -> bool:
    """Whether the presented signature is Twilio's for this request (either port form)."""
    return TrustSettings(auth_token=auth_token).verify(url, list(params.items()), presented)


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


SessionLookup = Callable[[str, str | None], Awaitable[SessionState]]


@dataclass(frozen=True, slots=True)
class VoiceStarted:
    """What the voice channel gets once the broker and the engines are up (`start_voice`),
    given in one step like the surface's `Started`."""

    ports: SpeechPorts
    # Create-once claims of used call tickets (a replay fails on every surface).
    tickets: KeyValue
    # The periodic sweep of calls whose owner died (see `deliveries`).
    sweeper: asyncio.Task[None]


@dataclass
class Telephony:
    """The routes' dependencies, built at the surface's composition root."""

    registry: CallRegistry
    find_session: SessionLookup
    open_session: Callable[[str, str], Awaitable[SessionState]]
    # The surface's one clock and id factory.
    clock: Clock
    ids: Ids
    # Who holds each call across surface processes (its bucket opens at start-up).
    ownership: CallOwnership
    # Called with every call that attaches (the delivery executor watches its session).
    on_attach: Callable[[Call], None] | None = None
    default_tenant: str = "default"
    trust: TrustSettings = field(default_factory=TrustSettings)
    # Everything else the voice channel was configured with (read once, at the root).
    voice: VoiceSettings = field(default_factory=VoiceSettings)
    started: VoiceStarted | None = None


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


def add_telephony_routes(router: APIRouter, telephony: Telephony) -> None:
    """`POST /v1/telephony/twilio/voice` and `WS /v1/telephony/twilio`."""
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
                trust.ticket_key, call_sid, custom, now=telephony.clock.now().timestamp(),
                ttl_s=trust.ticket_ttl_s,
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
        # The peer went. A reason the stream gave first stands: a phone that sent `stop` and
        # closed at once may be gone before our close frame, and it still hung up.
        pass
    finally:
        call = state.call
        if call is not None:
            for key, count in state.early.items():
                call.rejected[key] = call.rejected.get(key, 0) + count
            telephony.registry.detach(call)
            await call.hang_up(reason)
            await telephony.ownership.release(call.connection_id)


async def _claim_ticket(telephony: Telephony, nonce: str) -> None:
    """Use the ticket up, on every surface at once; StreamRefused when it was used before."""
    if telephony.started is None:
        raise StreamRefused(4403, "ticket_unverifiable")
    try:
        await telephony.started.tickets.create(f"t.{nonce}", b"used")
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
    started = telephony.started
    if not isinstance(start, dict) or started is None:
        raise FrameError("bad_start")
    params = text_params(start.get("customParameters"))
    if params is None:
        raise StreamRefused(4403, "bad_parameters")
    raw_call_sid = _text(start.get("callSid")) or ""
    stream_sid = (
        _text(start.get("streamSid")) or _text(frame.get("streamSid")) or telephony.ids.new("MZ")
    )
    call_sid = re.sub(r"[^A-Za-z0-9_-]", "", raw_call_sid)[:64] or telephony.ids.new("CA")
    trust = telephony.trust
    nonce: str | None = None
    if trust.signed and params.get(TICKET):
        # Present: it must be ours, for this call and exactly these parameters.
        try:
            nonce = check_ticket(
                trust.ticket_key, params[TICKET], raw_call_sid, params,
                now=telephony.clock.now().timestamp(),
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
    call = Call(websocket, session, stream_sid, call_sid, started.ports)
    await telephony.ownership.claim(call.connection_id)
    telephony.registry.attach(call)
    if telephony.on_attach is not None:
        telephony.on_attach(call)
    call.interaction(ChannelConnected(channel="voice", connection_id=call.connection_id))
    CALLS.labels(outcome="started").inc()
    return call


def opened_session_event(user_id: str, tenant_id: str, agent: str) -> SessionOpened:
    """A phone-opened session: its token is never shown, only a later chat could not use it."""
    return SessionOpened(
        user_id=user_id, tenant_id=tenant_id, agent=agent, token_hash=hash_token(new_token())
    )


async def append_control(
    js: Any,
    topology: Any,
    session_id: str,
    event: ControlEvent,
    *,
    clock: Clock,
    ids: Ids,
    timings: BusTimings = DEFAULT_TIMINGS,
    **refs: Any,
) -> None:
    """Append a control event to the session's control subject."""
    env: Envelope[ControlEvent] = Envelope(
        event_id=ids.new("ev"), occurred_at=clock.now(), session_id=session_id, event=event,
        **refs,
    )
    await append(js, CONTROL, topology.control_subject(session_id), env, timings=timings)
    metrics.EVENTS_PUBLISHED.labels(stream="control").inc()
