"""Appending events: dedup by message id, optimistic concurrency per subject, create-once keys.

Three guards against duplicates, each for its own horizon:
- `Nats-Msg-Id`: the broker drops a repeated publish inside the duplicate window.
- `Nats-Expected-Last-Subject-Sequence`: an append to an aggregate's subject only succeeds
  if nobody appended since the state it was decided from was loaded. An aggregate addressed
  by a wildcard over its event kinds (an operation, a batch, a delivery: `Topology._aggregate`)
  is appended to on the event's kind and checked over the wildcard
  (`Nats-Expected-Last-Subject-Sequence-Subject`, NATS 2.11+): see `placement`.
- create-once KV keys: a claim (an intent, a final delivery) stays taken forever, so a
  repeat beyond the duplicate window or across restarts still finds the first claim.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from libs import tracing
from libs.config import DEFAULT_TIMINGS, BusTimings
from libs.events import Envelope, EventCodec

from .topology import event_kind

if TYPE_CHECKING:
    from .replay import Replayed

B = TypeVar("B")

log = logging.getLogger(__name__)

# JetStream's error codes for a failed Nats-Expected-Last-Subject-Sequence check: 10071
# names the sequence found; 10164 (no sequence) is what a clustered stream's leader answers
# when it refuses the append before proposing it. Both are a lost race, never an outage.
_WRONG_LAST_SEQUENCE = frozenset({10071, 10164})
# "Temporarily unavailable": the stream is between leaders.
_UNAVAILABLE = 503
# The optimistic-concurrency guard's headers (stored with the message they guarded).
_EXPECTED_SEQ = "Nats-Expected-Last-Subject-Sequence"
_EXPECTED_SEQ_SUBJECT = "Nats-Expected-Last-Subject-Sequence-Subject"


class StaleReplica(nats.errors.Error):
    """A replica answered a read with less than the stream leader holds (it is catching up)."""

    def __str__(self) -> str:
        return "nats: a replica behind the stream leader answered; read again"


def broker_unavailable(exc: BaseException) -> bool:
    """Whether an error means "the broker cannot answer right now" (a stream or consumer
    between leaders, a node gone, a reconnect in progress), not "the request was wrong"."""
    if isinstance(exc, APIError):
        return exc.code == _UNAVAILABLE or isinstance(exc, ServiceUnavailableError)
    return isinstance(
        exc,
        NoStreamResponseError
        | nats.errors.NoRespondersError
        | nats.errors.TimeoutError
        | StaleReplica,
    )


# How long one append keeps trying while its stream has no leader (a node died and the
# replicas elect another, a few seconds) is `BusTimings.append_retry_s`: longer than an
# election, shorter than the callers' own redelivery in production.


class ConcurrencyConflict(Exception):
    """Someone appended to the subject since the caller loaded it: reload and decide again."""

    def __init__(self, subject: str, expected: int) -> None:
        super().__init__(f"{subject}: expected last sequence {expected} no longer holds")
        self.subject = subject
        self.expected = expected


class ClaimConflict(Exception):
    """A create-once key is already claimed with a different value."""

    def __init__(self, key: str, existing: bytes) -> None:
        super().__init__(f"key {key!r} is already claimed with a different value")
        self.key = key
        self.existing = existing


def placement(subject: str, event: object) -> tuple[str, str | None]:
    """Where an event appended to `subject` is stored, and the subject its expected last
    sequence is checked on when that is not the stored subject.

    A subject ending in `.*` addresses an aggregate whose events lie one subject per kind:
    the event goes to its kind's subject and the check spans the wildcard, so two writers
    racing on different kinds of one aggregate still conflict.
    """
    if not subject.endswith(".*"):
        return subject, None
    tag = str(event.__struct_config__.tag)  # type: ignore[attr-defined]
    return f"{subject[:-1]}{event_kind(tag)}", subject


def appended_to_empty(headers: Mapping[str, str] | None, subject: str) -> bool:
    """Whether a stored message was appended under the guard "`subject` holds nothing yet".

    The broker stores a message with the headers it was published with, the
    `Nats-Expected-Last-Subject-Sequence(-Subject)` guard included, and that guard held
    when it was stored: such a message is the first of its aggregate. A message without the
    guard (a producer that appended blindly) proves nothing and is answered False.
    """
    if not headers or headers.get(_EXPECTED_SEQ) != "0":
        return False
    checked_on = headers.get(_EXPECTED_SEQ_SUBJECT)
    if subject.endswith(".*"):
        return checked_on == subject
    return checked_on is None


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an event landed, and whether the broker saw it as a duplicate."""

    stream: str
    seq: int
    duplicate: bool


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
    """Publish one event and wait for the broker's acknowledgement.

    The message id defaults to the event id, so re-publishing the same event object is a
    no-op. `expected_last_subject_seq=0` means "the subject must be empty". While the
    stream is between leaders (a cluster node died) the publish is retried for a few
    seconds under the same message id, so the broker stores it once. A wildcard subject is
    placed by `placement`; a conflict names the wildcard.
    """
    subject, checked_on = placement(subject, envelope.event)
    with tracing.append_span(subject, envelope.event_id) as trace_headers:
        hdrs: dict[str, str] = {"Nats-Msg-Id": msg_id or envelope.event_id, **trace_headers}
        if headers:
            hdrs.update(headers)
        if expected_last_subject_seq is not None:
            hdrs[_EXPECTED_SEQ] = str(expected_last_subject_seq)
            if checked_on is not None:
                hdrs[_EXPECTED_SEQ_SUBJECT] = checked_on
        payload = codec.encode(envelope)
        deadline = time.monotonic() + timings.append_retry_s
        delay = 0.05
        # Whether an earlier try may have been stored with its ack lost (a timeout, not a
        # refusal): then a "duplicate" answer is this call's own first write.
        maybe_stored = False
        while True:
            try:
                ack = await js.publish(subject, payload, headers=hdrs)
                break
            except APIError as exc:
                if exc.err_code in _WRONG_LAST_SEQUENCE and expected_last_subject_seq is not None:
                    raise ConcurrencyConflict(
                        checked_on or subject, expected_last_subject_seq
                    ) from exc
                if not broker_unavailable(exc) or time.monotonic() >= deadline:
                    raise
            except (NoStreamResponseError, nats.errors.NoRespondersError):
                # Nobody leads the stream right now: nothing was stored.
                if time.monotonic() >= deadline:
                    raise
            except nats.errors.TimeoutError:
                maybe_stored = True
                if time.monotonic() >= deadline:
                    raise
            log.info("append to %s: stream unavailable, retrying", subject)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
    duplicate = bool(ack.duplicate) and not maybe_stored
    return Appended(stream=ack.stream, seq=ack.seq, duplicate=duplicate)


@dataclass(frozen=True, slots=True)
class Claim:
    """The outcome of a create-once claim."""

    created: bool
    value: bytes
    revision: int


async def claim_once(
    kv: KeyValue, key: str, value: bytes, *, timings: BusTimings = DEFAULT_TIMINGS
) -> Claim:
    """Claim a key forever. The same value again returns the first claim; another value fails.

    This is how "the same intent again" is told apart from "a different request reusing an
    intent key", which is an error and never a silent duplicate.
    """
    deadline = time.monotonic() + timings.append_retry_s
    while True:
        try:
            revision = await kv.create(key, value)
            break
        except (NoStreamResponseError, nats.errors.NoRespondersError):
            # The bucket is between leaders: nothing was written, so trying again is safe.
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.1)
        except KeyWrongLastSequenceError:
            return await _existing_claim(kv, key, value)
    return Claim(created=True, value=value, revision=revision)


async def _existing_claim(kv: KeyValue, key: str, value: bytes) -> Claim:
    entry = await kv.get(key)
    existing = entry.value or b""
    if existing != value:
        raise ClaimConflict(key, existing) from None
    return Claim(created=False, value=existing, revision=entry.revision or 0)


async def read_claim(kv: KeyValue, key: str) -> bytes | None:
    """The value a key was claimed with, if any."""
    try:
        entry = await kv.get(key)
    except KeyNotFoundError:
        return None
    return entry.value


class NatsEventStore:
    """The event store port (libs/bus/ports.py) over JetStream and the declared KV buckets.

    `buckets` maps a bucket's purpose ("intents", "deliveries", ...) to its handle; the
    mapping may be filled after construction (the runtime declares buckets at start-up).
    `timings` are the process's (`BusSettings.timings`): append retries, read mode.
    """

    def __init__(
        self,
        js: JetStreamContext,
        buckets: Mapping[str, KeyValue],
        *,
        timings: BusTimings = DEFAULT_TIMINGS,
    ) -> None:
        self._js = js
        self._buckets = buckets
        self._timings = timings

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
        """Publish one event (see `append`)."""
        return await append(
            self._js, codec, subject, envelope,
            expected_last_subject_seq=expected_last_subject_seq, msg_id=msg_id, headers=headers,
            timings=self._timings,
        )

    async def put(self, subject: str, data: bytes, *, msg_id: str) -> Appended:
        """Store a record that is not an event (a dead letter, a redrive marker) once."""
        ack = await self._js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
        return Appended(stream=ack.stream, seq=ack.seq, duplicate=bool(ack.duplicate))

    async def read_subject(
        self, stream: str, subject: str, codec: EventCodec[B]
    ) -> Replayed[B]:
        """Every message of one subject, by batched direct get."""
        # replay.py imports this module (StaleReplica), so its reader is imported late.
        from .replay import read_subject  # noqa: PLC0415

        return await read_subject(
            self._js, stream, subject, codec, consistent=self._timings.consistent_reads
        )

    async def last_seq(self, stream: str, subject: str) -> int:
        """The subject's last sequence, from the stream's leader (one request)."""
        from .replay import last_subject_seq  # noqa: PLC0415

        return await last_subject_seq(self._js, stream, subject)

    async def claim_once(self, bucket: str, key: str, value: bytes) -> Claim:
        """Claim a key of a bucket (by purpose) forever."""
        return await claim_once(self._buckets[bucket], key, value, timings=self._timings)

    async def read_claim(self, bucket: str, key: str) -> bytes | None:
        """The value a key was claimed with, if any."""
        return await read_claim(self._buckets[bucket], key)


class Connection(Protocol):
    """A process's broker connection as its runtime holds it (`libs.service.Runtime`)."""

    @property
    def jetstream(self) -> JetStreamContext:
        """The JetStream context; only valid once connected."""
        ...

    @property
    def buckets(self) -> Mapping[str, KeyValue]:
        """The declared KV buckets by purpose."""
        ...

    @property
    def timings(self) -> BusTimings:
        """The process's bus timings."""
        ...


class ConnectedEventStore:
    """The event store port over a connection opened after the parts that write were built.

    A service's composition root builds its handlers (and their repositories) before the
    runtime connects; every call here reads the connection as it is then.
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def _store(self) -> NatsEventStore:
        c = self._connection
        return NatsEventStore(c.jetstream, c.buckets, timings=c.timings)

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
        """Publish one event (see `append`)."""
        return await self._store().append(
            codec, subject, envelope,
            expected_last_subject_seq=expected_last_subject_seq, msg_id=msg_id, headers=headers,
        )

    async def put(self, subject: str, data: bytes, *, msg_id: str) -> Appended:
        """Store a record that is not an event once."""
        return await self._store().put(subject, data, msg_id=msg_id)

    async def read_subject(
        self, stream: str, subject: str, codec: EventCodec[B]
    ) -> Replayed[B]:
        """Every message of one subject."""
        return await self._store().read_subject(stream, subject, codec)

    async def last_seq(self, stream: str, subject: str) -> int:
        """The subject's last sequence."""
        return await self._store().last_seq(stream, subject)

    async def claim_once(self, bucket: str, key: str, value: bytes) -> Claim:
        """Claim a key of a bucket forever."""
        return await self._store().claim_once(bucket, key, value)

    async def read_claim(self, bucket: str, key: str) -> bytes | None:
        """The value a key was claimed with, if any."""
        return await self._store().read_claim(bucket, key)
