"""The agent's audio as a WebRTC track (`OutboundAudio`): a server-side queue of 48 kHz audio
and marks, read by the media stack one 20 ms frame at a time, in real time.

`Playout` (outbound.py) sends audio at the pace it plays, a lead ahead; this queue holds
that lead. `recv` paces itself on the wall clock like a microphone: silence when nothing is
queued, never a burst. A mark is reached when every byte queued before it has gone into a
frame handed to the encoder: the frame carrying an utterance's last bytes is padded with
silence, and the mark is reported (`on_mark`) as that frame is returned. A clear drops
everything queued, marks included (the ledger already settled them unheard).
"""

from __future__ import annotations

import asyncio
import fractions
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from .codec import WEBRTC_FRAME_BYTES, WEBRTC_FRAME_SAMPLES, WEBRTC_RATE, WebRtcUp

_TIME_BASE = fractions.Fraction(1, WEBRTC_RATE)
_SILENCE = bytes(WEBRTC_FRAME_BYTES)


@dataclass(frozen=True, slots=True)
class _Mark:
    name: str


def take_frame(items: deque[bytes | _Mark]) -> tuple[bytes, list[str]]:
    """The next 20 ms frame of the queue (padded with silence) and the marks it reaches.

    Pure over the queue: audio stops at a mark (the utterance ends in this frame), and
    every mark at the head once the frame is cut is reached by it.
    """
    frame = bytearray()
    while items and len(frame) < WEBRTC_FRAME_BYTES:
        head = items[0]
        if isinstance(head, _Mark):
            break
        need = WEBRTC_FRAME_BYTES - len(frame)
        if len(head) <= need:
            frame += head
            items.popleft()
        else:
            frame += head[:need]
            items[0] = head[need:]
    marks: list[str] = []
    while items and isinstance(items[0], _Mark):
        marks.append(items.popleft().name)  # type: ignore[union-attr]
    return bytes(frame) + _SILENCE[len(frame) :], marks


class OutboundAudio(MediaStreamTrack):
    """One call's outbound track: what `WebRtcWire` queues, at the pace it plays."""

    kind = "audio"

    def __init__(self, on_mark: Callable[[str], None]) -> None:
        super().__init__()
        self._on_mark = on_mark
        self._items: deque[bytes | _Mark] = deque()
        self._up = WebRtcUp()
        self._start: float | None = None
        self._pts = 0
        # Frames that carried agent audio (for the tests' and the bench's figures).
        self.voiced_frames = 0

    def push_audio(self, ulaw: bytes) -> None:
        """Queue a piece of the agent's audio (8 kHz μ-law)."""
        pcm = self._up.convert(ulaw)
        if pcm:
            self._items.append(pcm)

    def push_mark(self, name: str) -> None:
        """Queue a mark after the audio queued so far."""
        self._items.append(_Mark(name))

    def clear(self) -> None:
        """Drop everything queued."""
        self._items.clear()
        self._up.reset()

    @property
    def queued_ms(self) -> int:
        """Audio queued and not yet in a frame."""
        size = sum(len(i) for i in self._items if isinstance(i, bytes))
        return size * 1000 // (WEBRTC_RATE * 2)

    async def recv(self) -> AudioFrame:
        """The next 20 ms frame, when it is due."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.time()
        else:
            self._pts += WEBRTC_FRAME_SAMPLES
            wait = self._start + self._pts / WEBRTC_RATE - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
        pcm, marks = take_frame(self._items)
        if pcm != _SILENCE:
            self.voiced_frames += 1
        frame = AudioFrame(format="s16", layout="mono", samples=WEBRTC_FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.pts = self._pts
        frame.sample_rate = WEBRTC_RATE
        frame.time_base = _TIME_BASE
        for name in marks:
            self._on_mark(name)
        return frame
