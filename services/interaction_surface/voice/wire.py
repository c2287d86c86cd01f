"""What a call's audio goes out through (`CallWire`): one carrier's frames on one connection.

A call (call.py) and its playout (outbound.py) never see a socket or a frame: they hand
μ-law audio, marks and clears to a wire, and each media transport (Twilio Media Streams,
another carrier's stream, a WebRTC peer) is one module implementing it. Inbound, a
transport's loop decodes its own frames at its edge and calls the call's `on_media`,
`on_mark`, `on_dtmf` and `hang_up`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


class CallWire(Protocol):
    """One call's outbound side. A peer that is gone drops what is sent; nothing raises."""

    async def send_audio(self, ulaw: bytes) -> None:
        """A piece of the agent's audio, 8 kHz μ-law, in the order it plays."""

    async def send_mark(self, name: str) -> None:
        """A named mark after the audio sent so far; the peer returns it once played."""

    async def send_clear(self) -> None:
        """Flush every piece of audio the peer has queued and not yet played."""


@runtime_checkable
class SelfTimedWire(Protocol):
    """A wire whose carrier returns no marks (Vonage): it times the audio it sends and
    reports each mark itself once the audio before it has had time to play, or at once when
    a clear drops it (the stream loop hands it the call's `on_mark`)."""

    def played_to(self, on_mark: Callable[[str], None]) -> None:
        """Where the wire reports its marks."""
