"""Names of every stream, subject, consumer and bucket, derived from one prefix.

Subjects carry the session id in the third token (`<prefix>.<context>.<session_id>...`) so
one session can be replayed with a filter and sessions can be partitioned with NATS
subject mapping (`partition(N, 3)`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

# A subject token: no dots, wildcards or whitespace; small enough to keep subjects short.
_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


class InvalidSubjectToken(ValueError):
    """An id that cannot be placed in a subject token."""


def token(value: str) -> str:
    """Check that an id is safe as one subject token."""
    if not _TOKEN_RE.match(value):
        raise InvalidSubjectToken(f"not a valid subject token: {value!r}")
    return value


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

    def operation_subject(self, session_id: str, operation_id: str) -> str:
        """Events of one operation."""
        return f"{self.prefix}.operations.{token(session_id)}.{token(operation_id)}"

    def batch_subject(self, session_id: str, batch_id: str) -> str:
        """Events of one batch."""
        return f"{self.prefix}.batches.{token(session_id)}.{token(batch_id)}"

    def delivery_subject(self, session_id: str, delivery_id: str) -> str:
        """Events of one delivery."""
        return f"{self.prefix}.deliveries.{token(session_id)}.{token(delivery_id)}"

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

    def durable(self, service: str, role: str) -> str:
        """Durable consumer name for a service role."""
        return f"{token(service)}-{token(role)}"


_DESCRIPTIONS: dict[Context, str] = {
    Context.INTERACTION: "Conversation and channel events, one subject per session.",
    Context.CONTROL: "Barge-in and cancellation events, kept off the ordinary path.",
    Context.OPERATIONS: "Operation lifecycle events, one subject per operation.",
    Context.BATCHES: "Batch membership and drain events, one subject per batch.",
    Context.DELIVERIES: "Delivery lifecycle events, one subject per delivery.",
    Context.WORK: "Work commands for operation-workers; removed once acknowledged.",
    Context.DLQ: "Poison messages with the reason they were dead-lettered.",
}

# Buckets every deployment declares.
BUCKETS: tuple[str, ...] = ("intents", "deliveries", "turns", "leases")
