"""`WS /v1/telephony/twilio` after the handshake: the stream loop and the `start` that opens a call.

Frames are decoded at the boundary (`twilio_frames.decode_frame`) and matched on their type.
The loop is tolerant: a bad frame (garbage JSON, invalid base64, media before `start`) is
counted with its reason and dropped, never fatal. `start.customParameters`
`{session_id, token}` continues a session; `{user_id, tenant_id}` opens one; trust (call
tickets, the local-only rule without an auth token) is applied before anything is stored.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from fastapi import WebSocket, WebSocketDisconnect

from .call import FRAMES_REJECTED, Call
from .call_start import CallStart, StreamRefused, end_call, start_call
from .telephony import Telephony
from .trust import text_params
from .twilio_frames import (
    FrameError,
    TwilioConnected,
    TwilioDtmf,
    TwilioMark,
    TwilioMedia,
    TwilioStart,
    TwilioStop,
    TwilioWire,
    decode_frame,
)

log = logging.getLogger(__name__)

# The largest text frame read from a phone stream; a bigger one closes the stream (1009).
MAX_FRAME_CHARS = 64 * 1024


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

    def refuse(self, exc: StreamRefused) -> str:
        FRAMES_REJECTED.labels(reason=exc.reason).inc()
        log.warning("telephony: start refused (%s), closing %d", exc.reason, exc.code)
        self.refused = exc.code
        return "refused"

    async def handle(self, raw: str) -> str | None:
        """One text frame; returns why the stream ends, or None to keep reading."""
        try:
            frame = decode_frame(raw)
        except FrameError as exc:
            if exc.reason == "bad_parameters" and self.call is None:
                # Parameters no TwiML of ours could carry: the start opens nothing.
                return self.refuse(StreamRefused(4403, exc.reason))
            raise
        call = self.call
        match frame:
            case TwilioStart() if call is None:
                try:
                    self.call = await _start(
                        self.telephony, self.websocket, frame, local=self.local
                    )
                except StreamRefused as exc:
                    return self.refuse(exc)
            case TwilioStop():
                return "stop"
            case TwilioMedia(media=media):
                if call is None:
                    raise FrameError("media_before_start")
                await call.on_media(media.payload)
            case TwilioMark(mark=mark):
                if call is not None:
                    call.on_mark(mark.name)
            case TwilioDtmf(dtmf=dtmf):
                if call is not None:
                    call.on_dtmf(dtmf.digit)
            case TwilioConnected() | TwilioStart():
                pass
        return None


async def run_stream(telephony: Telephony, websocket: WebSocket, *, local: bool) -> None:
    """Read an accepted stream until it stops, is refused or goes; the call ends with it."""
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
            if len(raw) > MAX_FRAME_CHARS:
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
            await end_call(telephony, call, reason)


async def _start(
    telephony: Telephony, websocket: WebSocket, frame: TwilioStart, *, local: bool
) -> Call:
    """The call a `start` opens, or StreamRefused (before anything is stored)."""
    if telephony.started is None:
        raise FrameError("bad_start")
    start = frame.start
    params = text_params(start.custom_parameters)
    if params is None:
        raise StreamRefused(4403, "bad_parameters")
    stream_sid = start.stream_sid or frame.stream_sid or telephony.ids.new("MZ")
    wire = TwilioWire(websocket, stream_sid)
    return await start_call(
        telephony, wire, CallStart(call_id=start.call_sid, params=params, local=local)
    )
