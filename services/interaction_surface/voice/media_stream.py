"""A carrier's media stream after the handshake (`run_stream`): the loop that reads frames and
opens, feeds and ends the call, the same for every carrier.

A carrier is one wire module implementing `Carrier`: it decodes its own frames at the edge
into `stream_frames` and builds the `CallWire` the agent's audio goes out through. The loop
is tolerant: a bad frame (garbage JSON, invalid base64, media before the start) is counted
with its reason and dropped, never fatal. A start's parameters `{session_id, token}`
continue a session, `{user_id, tenant_id}` open one; trust is `call_start`'s, applied before
anything is stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Protocol

from fastapi import WebSocket, WebSocketDisconnect

from .call import FRAMES_REJECTED, Call
from .call_start import CallStart, StreamRefused, TicketTrust, end_call, start_call
from .stream_frames import (
    FrameError,
    StreamDtmf,
    StreamFrame,
    StreamMark,
    StreamMedia,
    StreamNothing,
    StreamStart,
    StreamStop,
)
from .telephony import Telephony
from .wire import CallWire, SelfTimedWire

log = logging.getLogger(__name__)

# The largest frame read from a phone stream; a bigger one closes the stream (1009). Every
# carrier's messages are a few kilobytes at most; parsing a huge one (or its audio) would
# stall every call of this process.
MAX_FRAME_CHARS = 64 * 1024


class Carrier(Protocol):
    """One carrier's media stream: its frames, decoded at the edge, and its outbound wire."""

    def decode(self, message: str | bytes) -> StreamFrame:
        """One WebSocket message as what it means to the call; FrameError when unusable."""

    def wire(self, websocket: WebSocket, stream_id: str) -> CallWire:
        """The call's outbound side on this stream."""


@dataclass
class _Stream:
    """One WebSocket's progress: the call once the start arrived, and how it ended."""

    telephony: Telephony
    carrier: Carrier
    websocket: WebSocket
    # A loopback peer with no proxy in between (may open sessions without an auth token).
    local: bool = False
    call: Call | None = None
    early: dict[str, int] = field(default_factory=dict)
    refused: int = 4404
    # Whose call tickets open a session here (None: Twilio's).
    trust: TicketTrust | None = None

    def reject(self, reason: str) -> None:
        if self.call is not None:
            self.call.reject(reason)
            return
        self.early[reason] = self.early.get(reason, 0) + 1
        FRAMES_REJECTED.labels(reason=reason).inc()
        log.warning("telephony: frame dropped before start (%s)", reason)

    def refuse(self, exc: StreamRefused) -> str:
        FRAMES_REJECTED.labels(reason=exc.reason).inc()
        log.warning("telephony: start refused (%s), closing %d", exc.reason, exc.code)
        self.refused = exc.code
        return "refused"

    async def handle(self, message: str | bytes) -> str | None:
        """One message; returns why the stream ends, or None to keep reading."""
        try:
            frame = self.carrier.decode(message)
        except FrameError as exc:
            if exc.reason == "bad_parameters" and self.call is None:
                # Parameters no document of ours could carry: the start opens nothing.
                return self.refuse(StreamRefused(4403, exc.reason))
            raise
        call = self.call
        match frame:
            case StreamStart() if call is None:
                try:
                    self.call = await self._start(frame)
                except StreamRefused as exc:
                    return self.refuse(exc)
            case StreamStop():
                return "stop"
            case StreamMedia(ulaw=ulaw):
                if call is None:
                    raise FrameError("media_before_start")
                await call.on_media(ulaw)
            case StreamMark(name=name):
                if call is not None:
                    call.on_mark(name)
            case StreamDtmf(digit=digit):
                if call is not None:
                    call.on_dtmf(digit)
            case StreamNothing() | StreamStart():
                pass
        return None

    async def _start(self, frame: StreamStart) -> Call:
        telephony = self.telephony
        if telephony.started is None:
            raise FrameError("bad_start")
        stream_id = frame.stream_id or telephony.ids.new("stream")
        wire = self.carrier.wire(self.websocket, stream_id)
        start = CallStart(
            call_id=frame.call_id, params=frame.params, local=self.local, trust=self.trust
        )
        call = await start_call(telephony, wire, start)
        if isinstance(wire, SelfTimedWire):
            # A carrier without marks: its wire says when the audio before a mark has played.
            wire.played_to(call.on_mark)
        return call


async def run_stream(
    telephony: Telephony,
    carrier: Carrier,
    websocket: WebSocket,
    *,
    local: bool,
    trust: TicketTrust | None = None,
) -> None:
    """Read an accepted stream until it stops, is refused or goes; the call ends with it.
    `trust` is the carrier's (whose tickets open sessions); None is Twilio's."""
    state = _Stream(telephony, carrier, websocket, local=local, trust=trust)
    reason = "disconnected"
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            raw: str | bytes | None = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if len(raw) > MAX_FRAME_CHARS:
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
            await end_call(telephony, call, reason)
