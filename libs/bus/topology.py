"""Names of every stream, subject, consumer and bucket, derived from one prefix.

Subjects carry the session id in the third token (`<prefix>.<context>.<session_id>...`) so
one session can be replayed with a filter and sessions can be partitioned by it.

`Partition` assigns each session to one of N partitions with the hash NATS uses for its
`partition(N, ...)` subject-mapping function (FNV-1a, 32 bits, of the session token, modulo N),
so moving the filter from the consumers to the broker later keeps every session where it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import msgspec

# A subject token: no dots, wildcards or whitespace; small enough to keep subjects short.
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class InvalidSubjectToken(ValueError):
    """An id that cannot be placed in a subject token."""


def token(value: str) -> str:
    """Check that an id is safe as one subject token."""
    if not _TOKEN_RE.match(value):
        raise InvalidSubjectToken(f"not a valid subject token: {value!r}")
    return value


def event_kind(tag: str) -> str:
    """The subject token of an event's kind: its tag after the context's name
    (`operation.committed` -> `committed`)."""
    _context, _, kind = tag.partition(".")
    return token(kind.replace(".", "_"))


class Context(StrEnum):
    """Bounded contexts that own a stream each."""

    INTERACTION = "interaction"
    CONTROL = "control"
    OPERATIONS = "operations"
    BATCHES = "batches"
    DELIVERIES = "deliveries"
    WORK = "work"
    DLQ = "dlq"


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One stream's name, subjects and retention."""

    context: Context
    name: str
    subjects: tuple[str, ...]
    work_queue: bool = False
    description: str = ""


@dataclass(frozen=True, slots=True)
class Topology:
    """All names for one prefix; the single source of subject layout."""

    prefix: str = "hl"

    def stream_name(self, context: Context) -> str:
        """Stream name, e.g. HL_OPERATIONS."""
        return f"{self.prefix.upper()}_{context.value.upper()}"

    def stream(self, context: Context) -> StreamSpec:
        """The declaration of a context's stream."""
        return StreamSpec(
            context=context,
            name=self.stream_name(context),
            subjects=(f"{self.prefix}.{context.value}.>",),
            work_queue=context is Context.WORK,
            description=_DESCRIPTIONS[context],
        )

    def streams(self) -> tuple[StreamSpec, ...]:
        """Every stream of the system."""
        return tuple(self.stream(c) for c in Context)

    # Subjects. Each aggregate has its own subject so appends can use
    # Nats-Expected-Last-Subject-Sequence as an optimistic-concurrency check.
    def session_subject(self, session_id: str) -> str:
        """Interaction events of one session (one aggregate per session)."""
        return f"{self.prefix}.interaction.{token(session_id)}.session"

    def control_subject(self, session_id: str) -> str:
        """Control events of one session."""
        return f"{self.prefix}.control.{token(session_id)}.control"

    # An aggregate addressed by kind: every event of one aggregate lies on
    # `<prefix>.<context>.<session>.<id>.<kind>`, so a consumer can ask the broker for only
    # the kinds it acts on. The aggregate's address is the wildcard over its kinds: loads,
    # reads and last-sequence requests take it, and an append to it is placed on the event's
    # kind by the event store, which checks the expected last sequence over the wildcard
    # (`Nats-Expected-Last-Subject-Sequence-Subject`, `store.placement`), so the aggregate
    # stays one optimistic-concurrency unit. Operations, batches and deliveries are addressed
    # this way.
    def _aggregate(self, context: Context, session_id: str, aggregate_id: str) -> str:
        return f"{self.prefix}.{context.value}.{token(session_id)}.{token(aggregate_id)}.*"

    def _aggregate_event(
        self, context: Context, session_id: str, aggregate_id: str, kind: str
    ) -> str:
        return (
            f"{self.prefix}.{context.value}.{token(session_id)}.{token(aggregate_id)}"
            f".{token(kind)}"
        )

    def kinds_filter(
        self, context: Context, events: Iterable[type[msgspec.Struct]]
    ) -> tuple[str, ...]:
        """Consumer filters selecting only the given kinds of event, of every aggregate of
        a context addressed by kind (operations, batches, deliveries)."""
        if context not in KIND_ADDRESSED:
            raise ValueError(f"{context.value} events are not addressed by kind")
        tags = sorted({str(e.__struct_config__.tag) for e in events})
        return tuple(f"{self.prefix}.{context.value}.*.*.{event_kind(tag)}" for tag in tags)

    def operation_subject(self, session_id: str, operation_id: str) -> str:
        """Every event of one operation: the aggregate's address, a wildcard over its kinds
        (each event lies on `operation_event_subject`)."""
        return self._aggregate(Context.OPERATIONS, session_id, operation_id)

    def operation_event_subject(self, session_id: str, operation_id: str, kind: str) -> str:
        """Where one kind of event of one operation is stored (kind: `event_kind(tag)`)."""
        return self._aggregate_event(Context.OPERATIONS, session_id, operation_id, kind)

    def operation_anywhere(self, operation_id: str) -> str:
        """Every event of an operation known only by id, whichever session holds it."""
        return f"{self.prefix}.operations.*.{token(operation_id)}.*"

    def operation_kinds_filter(self, events: Iterable[type[msgspec.Struct]]) -> tuple[str, ...]:
        """Consumer filters selecting only the given kinds of event, of every operation."""
        return self.kinds_filter(Context.OPERATIONS, events)

    def batch_subject(self, session_id: str, batch_id: str) -> str:
        """Every event of one batch: the aggregate's address, a wildcard over its kinds
        (each event lies on `batch_event_subject`)."""
        return self._aggregate(Context.BATCHES, session_id, batch_id)

    def batch_event_subject(self, session_id: str, batch_id: str, kind: str) -> str:
        """Where one kind of event of one batch is stored (kind: `event_kind(tag)`)."""
        return self._aggregate_event(Context.BATCHES, session_id, batch_id, kind)

    def delivery_subject(self, session_id: str, delivery_id: str) -> str:
        """Every event of one delivery: the aggregate's address, a wildcard over its kinds
        (each event lies on `delivery_event_subject`)."""
        return self._aggregate(Context.DELIVERIES, session_id, delivery_id)

    def delivery_event_subject(self, session_id: str, delivery_id: str, kind: str) -> str:
        """Where one kind of event of one delivery is stored (kind: `event_kind(tag)`)."""
        return self._aggregate_event(Context.DELIVERIES, session_id, delivery_id, kind)

    def work_subject(self, session_id: str, operation_id: str) -> str:
        """Work commands for one operation."""
        return f"{self.prefix}.work.{token(session_id)}.{token(operation_id)}"

    def dlq_subject(self, source: Context, session_id: str) -> str:
        """Dead letters from one source stream for one session."""
        return f"{self.prefix}.dlq.{source.value}.{token(session_id)}"

    def session_filter(self, context: Context, session_id: str) -> str:
        """Filter subject selecting one session's messages in a context's stream."""
        return f"{self.prefix}.{context.value}.{token(session_id)}.>"

    def context_filter(self, context: Context) -> str:
        """Filter subject selecting a whole context's stream."""
        return f"{self.prefix}.{context.value}.>"

    def session_of(self, subject: str) -> str:
        """The session id carried by a subject (third token)."""
        parts = subject.split(".")
        if len(parts) < 4 or parts[0] != self.prefix:
            raise InvalidSubjectToken(f"subject {subject!r} carries no session id")
        # DLQ subjects put the source context before the session id.
        return parts[3] if parts[1] == Context.DLQ.value else parts[2]

    # Key-value buckets, for create-once claims beyond the duplicate window.
    def bucket(self, purpose: str) -> str:
        """A KV bucket name, e.g. hl_intents."""
        return f"{self.prefix}_{token(purpose)}"

    def durable(self, service: str, role: str, partition: Partition | None = None) -> str:
        """Durable consumer name for a service role (one per partition when partitioned)."""
        name = f"{token(service)}-{token(role)}"
        if partition is None or partition.count == 1:
            return name
        return f"{name}-p{partition.index}"


_FNV_OFFSET = 0x811C9DC5
_FNV_PRIME = 0x01000193
# A StatefulSet pod is `<name>-<ordinal>`; the ordinal is its partition.
_ORDINAL_RE = re.compile(r"-(\d+)$")


def partition_of(session_id: str, count: int) -> int:
    """The partition (0..count-1) that owns a session: FNV-1a 32 of its token, modulo count."""
    h = _FNV_OFFSET
    for byte in session_id.encode():
        h = ((h ^ byte) * _FNV_PRIME) & 0xFFFFFFFF
    return h % count


class InvalidPartition(ValueError):
    """Partition settings that cannot describe one partition of N."""


@dataclass(frozen=True, slots=True)
class Partition:
    """Partition `index` of `count`: the sessions one process of a stateful service owns."""

    # HOLDLINE_PARTITION: this process's partition k; unset: 0 when there is one partition, else the
    # ordinal that ends the pod name (`HOSTNAME`, e.g. `batch-coordinator-2`).
    index: int = 0
    # HOLDLINE_PARTITIONS: how many partitions N share the sessions.
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise InvalidPartition(f"partition {self.index} of {self.count} does not exist")

    def owns(self, session_id: str) -> bool:
        """Whether this partition handles the session."""
        return self.count == 1 or partition_of(session_id, self.count) == self.index

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Partition:
        """`HOLDLINE_PARTITIONS` (N, default 1) and `HOLDLINE_PARTITION` (k).

        Without `HOLDLINE_PARTITION`, k is 0 when N is 1, else the ordinal that ends the pod
        name (`HOSTNAME`, e.g. `batch-coordinator-2`).
        """
        env = os.environ if environ is None else environ
        raw_count = env.get("HOLDLINE_PARTITIONS", "").strip() or "1"
        raw_index = env.get("HOLDLINE_PARTITION", "").strip()
        if not raw_index and raw_count == "1":
            raw_index = "0"  # one partition: whatever the host is called
        elif not raw_index:
            found = _ORDINAL_RE.search(env.get("HOSTNAME", ""))
            if found is None:
                # Guessing 0 would leave the other partitions' sessions without an owner.
                raise InvalidPartition(
                    f"HOLDLINE_PARTITIONS={raw_count} needs HOLDLINE_PARTITION or a pod ordinal"
                )
            raw_index = found.group(1)
        try:
            return cls(index=int(raw_index), count=int(raw_count))
        except ValueError as exc:
            raise InvalidPartition(
                f"HOLDLINE_PARTITION={raw_index!r} HOLDLINE_PARTITIONS={raw_count!r}: {exc}"
            ) from exc


# The contexts whose aggregates are addressed by kind (`Topology._aggregate`).
KIND_ADDRESSED: frozenset[Context] = frozenset(
    {Context.OPERATIONS, Context.BATCHES, Context.DELIVERIES}
)

_DESCRIPTIONS: dict[Context, str] = {
    Context.INTERACTION: "Conversation and channel events, one subject per session.",
    Context.CONTROL: "Barge-in and cancellation events, kept off the ordinary path.",
    Context.OPERATIONS: "Operation lifecycle events, one subject per operation and event kind.",
    Context.BATCHES: "Batch membership and drain events, one subject per batch and event kind.",
    Context.DELIVERIES: "Delivery lifecycle events, one subject per delivery and event kind.",
    Context.WORK: "Work commands for operation-workers; removed once acknowledged.",
    Context.DLQ: "Poison messages with the reason they were dead-lettered.",
}

# Buckets every deployment declares.
BUCKETS: tuple[str, ...] = ("intents", "deliveries", "turns", "leases")
