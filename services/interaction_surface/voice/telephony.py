"""What the phone edge is built with (`Telephony`) and what it gets at start-up (`VoiceStarted`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from nats.js.kv import KeyValue

from libs.clock import Clock, Ids
from libs.domain import SessionState

from .call import Call, CallRegistry, SpeechPorts
from .ownership import CallOwnership
from .settings import VoiceSettings
from .trust import TrustSettings

# A user, tenant or session id the edge takes (DESIGN §6).
ID_PATTERN = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

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
    # What each transport with connections of its own (WebRTC peers) closes them with when
    # the surface stops.
    closers: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    async def close_transports(self) -> None:
        """End every call a transport still holds (the surface stops)."""
        for close in self.closers:
            await close()
