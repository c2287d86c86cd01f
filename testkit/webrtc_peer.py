"""A browser's side of a WebRTC call, played by `aiortc`: real ICE, DTLS and SRTP to the surface.

`WebRtcPeer` offers one audio track each way and the `holdline` data channel, posts the
offer to `POST /v1/webrtc/offer`, and then behaves as the demo page does: it sends speech
(μ-law from `testkit.phone.speech`, resampled to 48 kHz, in real time, silence otherwise),
receives the agent's audio, and returns each `mark` once the audio before it has played
(`play_delay_s` after it arrived: the track delivers audio in real time, so the audio
before a mark is here when the mark is) or at once on a `clear`, as Twilio does.
`play=False`: the page never plays anything (marks never return).

`python -m testkit.webrtc_peer URL SESSION_ID TOKEN` connects, prints `connected` and
waits forever: a peer for a test to kill -9 (a browser that vanishes without closing).
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import json
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import AudioFrame

from services.interaction_surface.voice.codec import (
    WEBRTC_FRAME_BYTES,
    WEBRTC_FRAME_SAMPLES,
    WEBRTC_RATE,
    WebRtcUp,
    rms,
)

_SILENCE = bytes(WEBRTC_FRAME_BYTES)


class Microphone(MediaStreamTrack):
    """The peer's microphone: queued speech in real time, silence in between."""

    kind = "audio"

    def __init__(self) -> None:
        super().__init__()
        self._queue: deque[bytes] = deque()
        self._up = WebRtcUp()
        self._start: float | None = None
        self._pts = 0
        self.drained = asyncio.Event()
        self.drained.set()
        # perf_counter of the first and the last voiced frame of the latest `say` (the
        # bench's starts: barge-in, and speech stop).
        self.first_voiced_at: float | None = None
        self.last_voiced_at: float | None = None

    def say(self, ulaw: bytes) -> None:
        """Queue 8 kHz μ-law speech."""
        pcm = self._up.convert(ulaw)
        for at in range(0, len(pcm), WEBRTC_FRAME_BYTES):
            self._queue.append(pcm[at : at + WEBRTC_FRAME_BYTES].ljust(WEBRTC_FRAME_BYTES, b"\0"))
        self.first_voiced_at = None
        self.last_voiced_at = None
        self.drained.clear()

    async def recv(self) -> AudioFrame:
        """The next 20 ms, when it is due."""
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            self._start = time.time()
        else:
            self._pts += WEBRTC_FRAME_SAMPLES
            wait = self._start + self._pts / WEBRTC_RATE - time.time()
            if wait > 0:
                await asyncio.sleep(wait)
        pcm = self._queue.popleft() if self._queue else _SILENCE
        if pcm is not _SILENCE and rms(pcm) > 300:
            self.last_voiced_at = time.perf_counter()
            if self.first_voiced_at is None:
                self.first_voiced_at = self.last_voiced_at
        if not self._queue:
            self.drained.set()
        frame = AudioFrame(format="s16", layout="mono", samples=WEBRTC_FRAME_SAMPLES)
        frame.planes[0].update(pcm)
        frame.pts = self._pts
        frame.sample_rate = WEBRTC_RATE
        frame.time_base = fractions.Fraction(1, WEBRTC_RATE)
        return frame


@dataclass
class Mark:
    """A mark the surface sent: when it came, and when (and how) it was returned."""

    name: str
    arrived_at: float
    returned_at: float | None = None
    flushed: bool = False


@dataclass
class WebRtcPeer:
    """One browser call."""

    base_url: str
    params: dict[str, str]
    play: bool = True
    play_delay_s: float = 0.1
    pc: RTCPeerConnection = field(
        default_factory=lambda: RTCPeerConnection(RTCConfiguration(iceServers=[]))
    )
    mic: Microphone = field(default_factory=Microphone)
    call_id: str = ""
    marks: list[Mark] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    transcripts: list[dict[str, Any]] = field(default_factory=list)
    # Received agent audio: voiced 20 ms frames, and the perf_counter of each one's arrival.
    voiced_frames: int = 0
    voiced_at: list[float] = field(default_factory=list)
    _channel: Any = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _open: asyncio.Event = field(default_factory=asyncio.Event)

    async def connect(self, timeout_s: float = 15.0) -> None:
        """Offer, post, answer; until the data channel is open."""
        self.pc.addTransceiver(self.mic, direction="sendrecv")
        self._channel = self.pc.createDataChannel("holdline")
        self._channel.on("open", self._open.set)
        self._channel.on("message", self._on_message)
        self.pc.on("track", self._on_track)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        body = {"sdp": self.pc.localDescription.sdp, "type": "offer", **self.params}
        async with httpx.AsyncClient(base_url=self.base_url, timeout=timeout_s) as http:
            answer = await http.post("/v1/webrtc/offer", json=body)
        assert answer.status_code == 200, answer.text
        data = answer.json()
        assert data["type"] == "answer"
        self.call_id = data["call_id"]
        await self.pc.setRemoteDescription(RTCSessionDescription(data["sdp"], "answer"))
        await asyncio.wait_for(self._open.wait(), timeout_s)

    def send(self, frame: dict[str, Any] | str) -> None:
        """A data-channel frame as is (dicts as JSON)."""
        self._channel.send(json.dumps(frame) if isinstance(frame, dict) else frame)

    async def talk(self, ulaw: bytes) -> None:
        """Speak (real time), until all of it has been sent."""
        self.mic.say(ulaw)
        await self.mic.drained.wait()

    async def close(self) -> None:
        """Hang up cleanly."""
        for task in self._tasks:
            task.cancel()
        await self.pc.close()

    # ------------------------------------------------------------------ the page's side

    def _keep(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _on_track(self, track: MediaStreamTrack) -> None:
        self._keep(self._listen(track))

    async def _listen(self, track: MediaStreamTrack) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                assert isinstance(frame, AudioFrame)
                channels = len(frame.layout.channels)
                pcm = bytes(frame.planes[0])[: frame.samples * 2 * channels]
                if rms(pcm) > 300:
                    self.voiced_frames += 1
                    self.voiced_at.append(time.perf_counter())

    def _on_message(self, raw: str | bytes) -> None:
        frame = json.loads(raw)
        now = time.monotonic()
        if frame["type"] == "mark":
            mark = Mark(frame["name"], now)
            self.marks.append(mark)
            if self.play:
                self._keep(self._return_later(mark))
        elif frame["type"] == "clear":
            self.clears.append(time.perf_counter())
            for mark in self.marks:
                if mark.returned_at is None:
                    mark.flushed = True
                    self._return(mark)
        elif frame["type"] == "transcript":
            self.transcripts.append(frame)

    async def _return_later(self, mark: Mark) -> None:
        await asyncio.sleep(self.play_delay_s)
        if mark.returned_at is None:
            self._return(mark)

    def _return(self, mark: Mark) -> None:
        mark.returned_at = time.monotonic()
        self.send({"type": "mark", "name": mark.name})

    # ------------------------------------------------------------------ probes

    def mark(self, name: str) -> Mark | None:
        """The mark of this name, if it came."""
        return next((m for m in self.marks if m.name == name), None)

    async def wait_voiced(self, frames: int, timeout_s: float = 20.0) -> None:
        """Until at least `frames` voiced frames of agent audio arrived."""
        deadline = time.monotonic() + timeout_s
        while self.voiced_frames < frames:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.voiced_frames} voiced frames arrived")
            await asyncio.sleep(0.01)


async def _hold(url: str, session_id: str, token: str) -> None:
    peer = WebRtcPeer(url, {"session_id": session_id, "token": token})
    await peer.connect()
    print("connected", peer.call_id, flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_hold(*sys.argv[1:4]))
