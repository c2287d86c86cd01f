"""The envelope every event travels in: identities (docs/contract.md §3), schema version
and time."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Generic, Literal, TypeVar

import msgspec

SCHEMA_VERSION: Literal[1] = 1

E = TypeVar("E")


class Envelope(
    msgspec.Struct, Generic[E], frozen=True, kw_only=True, forbid_unknown_fields=True, gc=False
):
    """One immutable event with every identity it knows, its schema version and time."""

    event_id: str
    # A Literal lets the decoder itself refuse an unsupported version with a precise error.
    schema_version: Literal[1] = SCHEMA_VERSION
    # Timezone-aware only: a naive time is ambiguous across hosts.
    occurred_at: Annotated[datetime, msgspec.Meta(tz=True)]
    session_id: str
    turn_id: str | None = None
    response_id: str | None = None
    tool_call_id: str | None = None
    operation_id: str | None = None
    intent_key: str | None = None
    subject_key: str | None = None
    batch_id: str | None = None
    delivery_id: str | None = None
    playback_id: str | None = None
    agent: str | None = None
    # The event (or command) that caused this one, for causal order in the timeline.
    causation_id: str | None = None
    event: E
