"""The dead-letter record: a poison message, where it came from and why it was given up."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
from nats.aio.msg import Msg

from .position import Position


class DeadLetter(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A message a consumer gave up on, with the reason and everything needed to redrive it."""

    source_stream: str
    source_subject: str
    source_seq: int
    consumer: str
    num_delivered: int
    reason: str
    error: str
    payload: bytes
    dead_lettered_at: datetime


DEAD_LETTER_ENCODER = msgspec.json.Encoder()
DEAD_LETTER_DECODER = msgspec.json.Decoder(DeadLetter)


def given_up(msg: Msg, meta: Position, consumer: str, reason: str, error: str) -> DeadLetter:
    """The dead letter of a message a consumer gives up on (its error cut to 2,000 chars)."""
    return DeadLetter(
        source_stream=meta.stream,
        source_subject=msg.subject,
        source_seq=meta.stream_seq,
        consumer=consumer,
        num_delivered=meta.num_delivered,
        reason=reason,
        error=error[:2000],
        payload=msg.data,
        dead_lettered_at=datetime.now(UTC),
    )
