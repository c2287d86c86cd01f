"""The event store as a port: what a shell needs from the broker to load, decide and append.

Two implementations keep the same semantics, proven by one contract suite
(tests/unit/bus/test_store_contract.py, run again on the broker by
tests/component/bus/test_store_contract.py): `NatsEventStore` (libs/bus/store.py) over
JetStream and a KV bucket, used by every service, and `MemoryEventStore`
(libs/bus/memory.py), used only by fast unit tests of the shells.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from libs.events import Envelope, EventCodec

from .replay import Replayed
from .store import Appended, Claim

B = TypeVar("B")


class EventStore(Protocol):
    """Append with optimistic concurrency and dedup, read one subject, claim a key once."""

    async def append(
        self,
        codec: EventCodec[Any],
        subject: str,
        envelope: Envelope[Any],
        *,
        expected_last_subject_seq: int | None = None,
        msg_id: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Appended:
        """Store one event. A repeated message id (default: the event id) is absorbed and
        answers `duplicate=True`; `expected_last_subject_seq` (0: the subject is empty) that
        no longer holds raises `ConcurrencyConflict`. A subject ending in `.*` (an
        operation's, a batch's, a delivery's) stores the event on its kind's subject and
        checks the expectation over the wildcard (`store.placement`)."""
        ...

    async def put(self, subject: str, data: bytes, *, msg_id: str) -> Appended:
        """Store a record that is not an event (a dead letter, a redrive marker), once
        under its message id (a repeat answers `duplicate=True`)."""
        ...

    async def read_subject(
        self, stream: str, subject: str, codec: EventCodec[B]
    ) -> Replayed[B]:
        """Every message of one subject (wildcards allowed), in stream order."""
        ...

    async def last_seq(self, stream: str, subject: str) -> int:
        """The stream sequence of the subject's last message (0: the subject is empty)."""
        ...

    async def claim_once(self, bucket: str, key: str, value: bytes) -> Claim:
        """Claim a key of a bucket forever; the same value again returns the first claim,
        another value raises `ClaimConflict`."""
        ...

    async def read_claim(self, bucket: str, key: str) -> bytes | None:
        """The value a key was claimed with, if any."""
        ...
