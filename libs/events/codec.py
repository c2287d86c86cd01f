"""Encoding and decoding of events at the edge, with decoders built once per process.

A payload is checked for size first, then decoded strictly into the stream's tagged
union: anything malformed, of an unknown type, of another schema version or with
unknown fields is refused with a machine-readable reason, never passed on as a dict.
"""

from __future__ import annotations

from typing import Any, Generic, Literal, TypeVar

import msgspec

from .batches import BatchEvent
from .control import ControlEvent
from .deliveries import DeliveryEvent
from .envelope import Envelope
from .interaction import InteractionEvent
from .operations import OperationEvent
from .work import WorkCommand

DecodeReason = Literal["oversized", "malformed", "unknown_type", "wrong_version", "invalid"]

DEFAULT_MAX_EVENT_BYTES = 256 * 1024

B = TypeVar("B")


class EventDecodeError(ValueError):
    """A payload that is not a valid event of the expected stream."""

    def __init__(self, reason: DecodeReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: DecodeReason = reason
        self.detail = detail


def _classify(message: str) -> DecodeReason:
    if "$.event.type" in message:
        return "unknown_type"
    if "$.schema_version" in message:
        return "wrong_version"
    # JSON text is UTF-8 by definition: bytes that are not are malformed, not a wrong field.
    if message.startswith(("JSON is malformed", "Input data was truncated", "Invalid UTF-8")):
        return "malformed"
    return "invalid"


_ENCODER = msgspec.json.Encoder()


class EventCodec(Generic[B]):
    """Encoder and strict decoder for the envelopes of one stream."""

    def __init__(self, body_type: Any, *, max_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._decoder: msgspec.json.Decoder[Envelope[B]] = msgspec.json.Decoder(Envelope[body_type])
        self.max_bytes = max_bytes

    def encode(self, envelope: Envelope[B]) -> bytes:
        """Serialize an envelope; refuses one that would exceed the size limit."""
        data = _ENCODER.encode(envelope)
        if len(data) > self.max_bytes:
            raise EventDecodeError("oversized", f"{len(data)} bytes > limit {self.max_bytes}")
        return data

    def decode(self, data: bytes) -> Envelope[B]:
        """Parse a payload into an envelope, or raise EventDecodeError with the reason."""
        if len(data) > self.max_bytes:
            raise EventDecodeError("oversized", f"{len(data)} bytes > limit {self.max_bytes}")
        try:
            return self._decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise EventDecodeError(_classify(str(exc)), str(exc)) from exc


INTERACTION: EventCodec[InteractionEvent] = EventCodec(InteractionEvent)
CONTROL: EventCodec[ControlEvent] = EventCodec(ControlEvent)
OPERATIONS: EventCodec[OperationEvent] = EventCodec(OperationEvent)
BATCHES: EventCodec[BatchEvent] = EventCodec(BatchEvent)
DELIVERIES: EventCodec[DeliveryEvent] = EventCodec(DeliveryEvent)
WORK: EventCodec[WorkCommand] = EventCodec(WorkCommand)


def encode(envelope: Envelope[Any]) -> bytes:
    """Serialize any envelope (the body's tag says its type)."""
    return _ENCODER.encode(envelope)
