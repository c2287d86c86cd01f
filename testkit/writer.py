"""Another writer, as a test or a benchmark plays one: events appended through the event store
port (`NatsEventStore`), never the bus's bare `append`, so the test writes the way every
service does."""

from __future__ import annotations

from typing import Any

from nats.js import JetStreamContext

from libs.bus import Appended, NatsEventStore
from libs.config import DEFAULT_TIMINGS, BusTimings
from libs.events import Envelope, EventCodec


async def append(
    js: JetStreamContext,
    codec: EventCodec[Any],
    subject: str,
    envelope: Envelope[Any],
    *,
    expected_last_subject_seq: int | None = None,
    msg_id: str | None = None,
    headers: dict[str, str] | None = None,
    timings: BusTimings = DEFAULT_TIMINGS,
) -> Appended:
    """Store one event as a service would (see `EventStore.append`)."""
    return await NatsEventStore(js, {}, timings=timings).append(
        codec, subject, envelope, expected_last_subject_seq=expected_last_subject_seq,
        msg_id=msg_id, headers=headers,
    )
