"""The dead-letter record: a poison message, where it came from and why it was given up."""

from __future__ import annotations

from datetime import datetime

import msgspec


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
