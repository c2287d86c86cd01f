"""One session's log as the live view keeps it: its entries (each event, where it sits in
its stream, and the session's cursor after it), what the turns read of it, and the cursors
clients resume a stream with."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec

from libs.bus import Context
from libs.events import Envelope, TurnReplied
from libs.events.interaction import Channel

# The streams a session's history spans, in the order cursors list them.
STREAMS: tuple[Context, ...] = (
    Context.INTERACTION,
    Context.CONTROL,
    Context.OPERATIONS,
    Context.BATCHES,
    Context.DELIVERIES,
)
STREAM_INDEX = {context: i for i, context in enumerate(STREAMS)}

Cursor = tuple[int, ...]

# `session.closed` with this reason erases the session: its interaction events (texts
# included) leave every projection here, and `DELETE /v1/sessions/{id}` purges them from the
# stream, so a rebuilt view never sees them either.
ERASED = "erased"


def encode_cursor(cursor: Cursor) -> str:
    """A cursor as the opaque string clients hand back: per-stream sequences, dotted."""
    return ".".join(str(n) for n in cursor)


def decode_cursor(text: str | None) -> Cursor:
    """Parse a cursor; empty means "from the start". Raises ValueError when malformed."""
    if not text:
        return (0,) * len(STREAMS)
    parts = text.split(".")
    if len(parts) != len(STREAMS) or not all(p.isdigit() and len(p) <= 19 for p in parts):
        raise ValueError("cursor is not one this server issued")
    return tuple(int(p) for p in parts)


class Entry(msgspec.Struct, frozen=True, gc=False):
    """One event of a session, where it sits in its stream, and the session's cursor after it.

    Not tracked by the cyclic collector, like the envelope it holds (libs/events/__init__.py):
    the view keeps one per event, and a full collection would walk them all.
    """

    stream: Context
    seq: int
    envelope: Envelope[Any]
    cursor: Cursor

    def after(self, cursor: Cursor) -> bool:
        """Whether a client that saw `cursor` has not seen this entry yet."""
        return self.seq > cursor[STREAM_INDEX[self.stream]]


Listener = Callable[[Entry], None]


@dataclass
class SessionLog:
    """Everything the surface knows about one session."""

    session_id: str
    entries: list[Entry] = field(default_factory=list)
    high: list[int] = field(default_factory=lambda: [0] * len(STREAMS))
    operation_ids: list[str] = field(default_factory=list)
    batch_ids: list[str] = field(default_factory=list)
    delivery_ids: list[str] = field(default_factory=list)
    listeners: set[Listener] = field(default_factory=set)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    # The turn received and not yet replied, and when it was received.
    open_turn: tuple[str, datetime] | None = None
    # Index of the first message the active agent's model sees (a fresh handoff resets it).
    context_from: int = 0
    # Deliveries whose text is already in the visible history.
    written: set[str] = field(default_factory=set)
    # Per client turn id its latest turn; per such turn its channel and, once written, its
    # reply. A repeated client turn id is answered from these (`turn_plan.opening`).
    client_turns: dict[str, str] = field(default_factory=dict)
    turn_channels: dict[str, Channel] = field(default_factory=dict)
    replies: dict[str, Envelope[TurnReplied]] = field(default_factory=dict)
    # When `session.opened` was written: the token's issue time.
    opened_at: datetime | None = None
    # Erased: no interaction event of the session is kept or shown any more.
    erased: bool = False
    # When anything of the session last happened or was asked for (monotonic seconds): an
    # idle session leaves memory (core/eviction.py).
    touched: float = field(default_factory=time.monotonic)

    @property
    def session_seq(self) -> int:
        """Last sequence of the session's interaction subject (its only subject there)."""
        return self.high[STREAM_INDEX[Context.INTERACTION]]

    @property
    def cursor(self) -> Cursor:
        """The cursor after the latest entry."""
        return tuple(self.high)
