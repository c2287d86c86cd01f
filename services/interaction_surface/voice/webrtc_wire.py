"""A call's outbound side on a WebRTC peer (`WebRtcWire`, a `CallWire`): audio into the
outbound track, marks and clears on the `holdline` data channel.

A mark goes to the page when the track reaches it (all audio before it is in the track),
and the page returns it once that audio has played. A clear drops the server-side queue at
once, then tells the page to drop its own. Frames sent before the data channel is open wait
for it (in order); a peer that is gone drops them: nothing raises.
"""

from __future__ import annotations

import logging
from typing import Literal, Protocol

from .webrtc_frames import clear_frame, mark_frame, transcript_frame
from .webrtc_track import OutboundAudio

log = logging.getLogger(__name__)

# Frames held for a data channel that is not open yet; beyond this the oldest are dropped.
_MAX_WAITING = 256


class DataChannel(Protocol):
    """What the wire needs of an `RTCDataChannel`."""

    @property
    def readyState(self) -> str:  # noqa: N802 - the WebRTC name
        """`connecting`, `open`, `closing` or `closed`."""

    def send(self, data: str) -> None:
        """Send one text message."""


class WebRtcWire:
    """One call's outbound side on a peer connection."""

    def __init__(self) -> None:
        self.track = OutboundAudio(self._mark_reached)
        self.channel: DataChannel | None = None
        self._waiting: list[str] = []
        # Marks sent to the page and not returned yet: any other name it returns is unknown.
        self.outstanding: set[str] = set()

    def attach(self, channel: DataChannel) -> None:
        """The page's `holdline` channel is open: frames flow (those waiting first)."""
        self.channel = channel
        waiting, self._waiting = self._waiting, []
        for frame in waiting:
            self._send(frame)

    def _send(self, frame: str) -> None:
        channel = self.channel
        if channel is None:
            self._waiting = [*self._waiting[-(_MAX_WAITING - 1) :], frame]
            return
        if channel.readyState != "open":
            return
        try:
            channel.send(frame)
        except Exception as exc:  # noqa: BLE001 - a peer gone mid-send hears nothing more
            log.debug("webrtc: data channel send failed: %r", exc)

    def _mark_reached(self, name: str) -> None:
        self.outstanding.add(name)
        self._send(mark_frame(name))

    def returned(self, name: str) -> bool:
        """The page returned a mark: whether it was one sent and still outstanding."""
        if name in self.outstanding:
            self.outstanding.discard(name)
            return True
        return False

    def transcript(self, role: Literal["user", "assistant"], text: str) -> None:
        """A line of the conversation for the page to show."""
        self._send(transcript_frame(role, text))

    async def send_audio(self, ulaw: bytes) -> None:
        """Into the track's queue; it plays out in real time."""
        self.track.push_audio(ulaw)

    async def send_mark(self, name: str) -> None:
        """After the audio queued so far; sent to the page once the track reaches it."""
        self.track.push_mark(name)

    async def send_clear(self) -> None:
        """Drop the server-side queue, then the page's (it returns its pending marks)."""
        self.track.clear()
        self._send(clear_frame())
