"""One browser call over WebRTC (`WebRtcPeer`) and the process's peers (`WebRtcPeers`).

The offer is checked first (`check_offer`, pure: SDP, an audio m-line, a codec we take);
then an `aiortc` peer connection answers it with one audio track each way (Opus 48 kHz
preferred, PCMU accepted) and takes the page's `holdline` data channel. The call opens
through `call_start.start_call` (trust, session, attach), the same step as a phone call's:
inbound audio is the remote track's frames converted to 8 kHz μ-law (`codec.WebRtcDown`)
into `Call.on_media`; the agent's audio goes out through `WebRtcWire`. A returned mark goes
to `Call.on_mark`; a bad or unknown one is counted and dropped (`Call.reject`).

The call ends once, with its end recorded (`call_start.end_call`), when the peer closes
(`peer_closed`), its connection fails (`peer_failed`), it sends no audio for
`HOLDLINE_WEBRTC_MEDIA_TIMEOUT_S` (`peer_vanished`), or the surface stops (`shutdown`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from typing import Any

from aiortc import (
    RTCConfiguration,
    RTCDataChannel,
    RTCIceServer,
    RTCPeerConnection,
    RTCSessionDescription,
)
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from aiortc.rtcrtpreceiver import RTCRtpReceiver
from aiortc.rtcrtpsender import RTCRtpSender
from av import AudioFrame

from libs.events import TurnReceived, TurnReplied

from ..core.session_log import Entry
from ..core.view import SurfaceView
from .call import Call
from .call_start import CallStart, end_call, start_call
from .codec import WebRtcDown
from .stream_frames import FrameError
from .telephony import Telephony
from .webrtc_frames import CHANNEL_LABEL, decode_page_frame
from .webrtc_settings import WebRtcSettings
from .webrtc_wire import WebRtcWire

log = logging.getLogger(__name__)

# The codecs a browser call may use, in order of preference (the recognizer's rate is 8 kHz
# either way; Opus is what browsers send by default).
CODECS = ("audio/opus", "audio/PCMU")
_RTPMAP = re.compile(r"^a=rtpmap:\d+ ([A-Za-z0-9_.-]+)/(\d+)", re.MULTILINE)
# The largest offer taken: a browser's is a few kilobytes.
MAX_SDP_CHARS = 32 * 1024


class OfferRefused(Exception):
    """An offer that opens nothing: answered with `status` problem+json."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def check_offer(sdp: str) -> None:
    """OfferRefused unless `sdp` is a session description with an audio m-line offering
    Opus 48 kHz or PCMU (pure: read before a peer connection is built)."""
    lines = sdp.replace("\r\n", "\n").strip().split("\n")
    if not lines or lines[0].strip() != "v=0" or not any(x.startswith("m=") for x in lines):
        raise OfferRefused(400, "the offer is not an SDP session description")
    sections = ("\n" + "\n".join(lines)).split("\nm=")[1:]
    audio = [s for s in sections if s.startswith("audio ")]
    if not audio:
        raise OfferRefused(422, "the offer has no audio m-line")
    for section in audio:
        for name, rate in _RTPMAP.findall(section):
            if (name.lower(), rate) in (("opus", "48000"), ("pcmu", "8000")):
                return
    raise OfferRefused(422, "the offer's audio codecs are not supported (Opus 48 kHz or PCMU)")


# aiortc's receiver keeps its jitter buffer in a private attribute, built with 4 packets of
# prefetch for audio; the major version is pinned (pyproject), and without the attribute the
# default stays (logged).
_JITTER_ATTRIBUTE = "_RTCRtpReceiver__jitter_buffer"


def shorten_jitter_buffer(receiver: RTCRtpReceiver, packets: int) -> bool:
    """Hand inbound audio to the call after `packets` packets, not aiortc's 4: barge-in
    latency is the VAD's window plus this. False when aiortc no longer has the buffer."""
    current = getattr(receiver, _JITTER_ATTRIBUTE, None)
    if not isinstance(current, JitterBuffer):
        return False
    setattr(receiver, _JITTER_ATTRIBUTE, JitterBuffer(capacity=current.capacity, prefetch=packets))
    return True


def _configuration(settings: WebRtcSettings) -> RTCConfiguration:
    servers = [
        RTCIceServer(urls=list(s.urls), username=s.username, credential=s.credential)
        for s in settings.ice_servers
    ]
    # An empty list, not None: aiortc would otherwise ask a public STUN server.
    return RTCConfiguration(iceServers=servers)


class WebRtcPeer:
    """One peer connection and the call it carries."""

    def __init__(
        self, telephony: Telephony, view: SurfaceView, settings: WebRtcSettings, call_id: str
    ) -> None:
        self.telephony = telephony
        self.call_id = call_id
        self.wire = WebRtcWire()
        self.pc = RTCPeerConnection(_configuration(settings))
        self.call: Call | None = None
        self.ended = asyncio.Event()
        self._view = view
        self._timeout_s = settings.media_timeout_s
        self._jitter_packets = settings.jitter_packets
        self._remote: MediaStreamTrack | None = None
        self._pump: asyncio.Task[None] | None = None
        self._ending: asyncio.Task[None] | None = None
        self._down = WebRtcDown()
        self.pc.on("track", self._on_track)
        self.pc.on("datachannel", self._on_datachannel)
        self.pc.on("connectionstatechange", self._on_state)

    async def answer(self, sdp: str, start: CallStart) -> str:
        """Answer the offer and open the call (OfferRefused, StreamRefused); the answer SDP."""
        transceiver = self.pc.addTransceiver(self.wire.track, direction="sendrecv")
        codecs = [c for c in RTCRtpSender.getCapabilities("audio").codecs
                  if c.mimeType in CODECS]
        codecs.sort(key=lambda c: CODECS.index(c.mimeType))
        transceiver.setCodecPreferences(codecs)
        if not shorten_jitter_buffer(transceiver.receiver, self._jitter_packets):
            log.warning("webrtc: aiortc's jitter buffer is not where expected; default kept")
        try:
            await self.pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="offer"))
            await self.pc.setLocalDescription(await self.pc.createAnswer())
        except Exception as exc:  # noqa: BLE001 - aiortc refuses a bad offer many ways
            raise OfferRefused(422, f"the offer cannot be answered: {exc}") from None
        if self._remote is None:
            raise OfferRefused(422, "the offer sends no audio")
        self.call = await start_call(self.telephony, self.wire, start)
        self._view.subscribe(self.call.session_id, self._on_entry)
        self._pump = asyncio.create_task(self._inbound(self._remote, self.call))
        local = self.pc.localDescription
        return str(local.sdp)

    # ------------------------------------------------------------------ inbound

    def _on_track(self, track: MediaStreamTrack) -> None:
        if track.kind == "audio" and self._remote is None:
            self._remote = track

    def _on_datachannel(self, channel: RTCDataChannel) -> None:
        if channel.label != CHANNEL_LABEL:
            log.info("webrtc %s: data channel %r ignored", self.call_id, channel.label)
            return

        @channel.on("message")
        def on_message(message: str | bytes) -> None:
            self._on_page_frame(message)

        if channel.readyState == "open":
            self.wire.attach(channel)
        else:
            channel.on("open", lambda: self.wire.attach(channel))

    def _on_page_frame(self, message: str | bytes) -> None:
        call = self.call
        if call is None:
            return
        try:
            frame = decode_page_frame(message)
        except FrameError as exc:
            call.reject(exc.reason)
            return
        if not self.wire.returned(frame.name):
            call.reject("unknown_mark")
            return
        call.on_mark(frame.name)

    async def _inbound(self, track: MediaStreamTrack, call: Call) -> None:
        """The remote track's audio into the call, until it ends or goes quiet too long."""
        reason = "peer_closed"
        try:
            while True:
                frame = await asyncio.wait_for(track.recv(), self._timeout_s)
                if not isinstance(frame, AudioFrame):
                    continue
                channels = len(frame.layout.channels)
                pcm = bytes(frame.planes[0])[: frame.samples * 2 * channels]
                await call.on_media(self._down.convert(pcm, frame.sample_rate, channels))
        except TimeoutError:
            reason = "peer_vanished"
        except MediaStreamError:
            reason = "peer_closed"
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("webrtc %s: inbound audio failed", self.call_id)
            reason = "inbound_failed"
        self.end(reason)

    def _on_state(self) -> None:
        state = self.pc.connectionState
        if state in ("failed", "closed"):
            self.end(f"peer_{state}")

    def _on_entry(self, entry: Entry) -> None:
        event = entry.envelope.event
        if isinstance(event, TurnReceived):
            self.wire.transcript("user", event.text)
        elif isinstance(event, TurnReplied):
            self.wire.transcript("assistant", event.text)

    # ------------------------------------------------------------------ end

    def end(self, reason: str) -> asyncio.Task[None]:
        """End the call once (its end recorded) and close the connection."""
        if self._ending is None:
            self._ending = asyncio.create_task(self._end(reason))
        return self._ending

    async def _end(self, reason: str) -> None:
        try:
            call = self.call
            if call is not None:
                self._view.unsubscribe(call.session_id, self._on_entry)
                await end_call(self.telephony, call, reason)
            if self._pump is not None and self._pump is not asyncio.current_task():
                self._pump.cancel()
            self.wire.track.stop()
            with contextlib.suppress(Exception):
                await self.pc.close()
        finally:
            self.ended.set()


class WebRtcPeers:
    """The process's peer connections: each until its call ends; all closed at shutdown."""

    def __init__(self) -> None:
        self.peers: dict[str, WebRtcPeer] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def add(self, peer: WebRtcPeer) -> None:
        """Hold a peer until it ends."""
        self.peers[peer.call_id] = peer

        async def forget() -> None:
            await peer.ended.wait()
            self.peers.pop(peer.call_id, None)

        task = asyncio.create_task(forget())
        self._keep(task)

    def _keep(self, task: asyncio.Task[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close_all(self, reason: str = "shutdown") -> None:
        """End every call and close its connection (the surface stops)."""
        ending = [peer.end(reason) for peer in list(self.peers.values())]
        if ending:
            await asyncio.gather(*ending, return_exceptions=True)
