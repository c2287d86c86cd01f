"""What a call needs from the rest of the surface (`SpeechPorts`, wired in `wiring`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .engines.base import SpeechToText, TextToSpeech
from .floor import FloorConfig
from .playback import Settled
from .vad import VadConfig

# Looks at a voice turn's proposed calls before admission (see `floor.doubtful_values`).
Review = Callable[[Sequence[tuple[str, Mapping[str, Any]]]], str | None]


@dataclass
class SpeechPorts:
    """What a call needs from the rest of the surface (wired in `wiring`)."""

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
