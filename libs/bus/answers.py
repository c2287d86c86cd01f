"""JetStream API answers decoded only as far as their readers need.

nats-py parses every answer whole into its dataclasses (a stream's configuration and state,
a stored message's base64 data and headers, an acknowledgement through `json` and a field
walk): several times the cost of the request itself for a caller that reads one number.
Here each answer is a msgspec struct of the fields read, decoded once, and the API's error
is raised as nats-py raises it (`APIError.from_error`: `NotFoundError` for a 404, the
error code kept), so callers catch the same exceptions either way.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from nats.js.errors import APIError


class Answer(msgspec.Struct):
    """A JetStream API answer: its fields as a subclass names them, or the API's error."""

    error: dict[str, Any] | None = None


class PubAck(Answer):
    """The broker's acknowledgement of a publish to a stream."""

    stream: str = ""
    seq: int = 0
    duplicate: bool = False


A = TypeVar("A", bound=Answer)


def decoded(decoder: msgspec.json.Decoder[A], data: bytes) -> A:
    """Decode an answer; the API's error, if it is one, raised as nats-py's."""
    answer = decoder.decode(data)
    if answer.error is not None:
        APIError.from_error(answer.error)
    return answer


PUB_ACK = msgspec.json.Decoder(PubAck)
