"""An in-memory event store with the broker's append, read and claim semantics.

Only for fast unit tests of the shells (load, decide, append without a broker); the
shared contract suite keeps it equal to `NatsEventStore`. One sequence counter spans all
subjects, as a stream's does, so sequences are comparable across the subjects of a stream.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, TypeVar

from libs.events import Envelope, EventCodec, EventDecodeError

from .handling import Received
from .replay import Replayed
from .store import Appended, Claim, ClaimConflict, ConcurrencyConflict, placement

B = TypeVar("B")


@dataclass(frozen=True, slots=True)
class _Stored:
    seq: int
    subject: str
    data: bytes
    headers: dict[str, str]


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` one token, `>` one or more trailing tokens."""
    want = pattern.split(".")
    have = subject.split(".")
    for i, part in enumerate(want):
        if part == ">":
            return len(have) > i
        if i >= len(have) or (part != "*" and part != have[i]):
            return False
    return len(want) == len(have)


@dataclass
class MemoryEventStore:
    """Events of every subject in one ordered log, message ids seen, claimed keys."""

    stream: str = "memory"
    _log: list[_Stored] = field(default_factory=list)
    _last: dict[str, int] = field(default_factory=dict)
    _msg_ids: dict[str, int] = field(default_factory=dict)
    _claims: dict[str, dict[str, tuple[bytes, int]]] = field(
        default_factory=lambda: defaultdict(dict)
    )

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
        """Store one event (see `EventStore.append`)."""
        mid = msg_id or envelope.event_id
        subject, checked_on = placement(subject, envelope.event)
        # JetStream checks the expected sequence before the message id: a retry of a stored
        # event whose expectation no longer holds is refused, not reported as a duplicate.
        if (
            expected_last_subject_seq is not None
            and self._last_matching(checked_on or subject) != expected_last_subject_seq
        ):
            raise ConcurrencyConflict(checked_on or subject, expected_last_subject_seq)
        if mid in self._msg_ids:
            return Appended(stream=self.stream, seq=self._msg_ids[mid], duplicate=True)
        seq = len(self._log) + 1
        self._log.append(
            _Stored(
                seq=seq, subject=subject, data=codec.encode(envelope), headers=dict(headers or {})
            )
        )
        self._last[subject] = seq
        self._msg_ids[mid] = seq
        return Appended(stream=self.stream, seq=seq, duplicate=False)

    async def put(self, subject: str, data: bytes, *, msg_id: str) -> Appended:
        """Store a record that is not an event once (see `EventStore.put`)."""
        if msg_id in self._msg_ids:
            return Appended(stream=self.stream, seq=self._msg_ids[msg_id], duplicate=True)
        seq = len(self._log) + 1
        self._log.append(_Stored(seq=seq, subject=subject, data=data, headers={}))
        self._last[subject] = seq
        self._msg_ids[msg_id] = seq
        return Appended(stream=self.stream, seq=seq, duplicate=False)

    def records(self, subject: str) -> list[bytes]:
        """The data of every message stored on subjects matching `subject` (tests read
        dead letters this way)."""
        return [s.data for s in self._log if subject_matches(subject, s.subject)]

    async def read_subject(
        self, stream: str, subject: str, codec: EventCodec[B]
    ) -> Replayed[B]:
        """Every message of one subject (wildcards allowed), in order."""
        out: Replayed[B] = Replayed()
        for stored in self._log:
            if not subject_matches(subject, stored.subject):
                continue
            out.last_seq = stored.seq
            try:
                envelope = codec.decode(stored.data)
            except EventDecodeError as exc:
                out.rejected.append((stored.seq, exc))
                continue
            out.items.append(
                Received(
                    envelope=envelope, subject=stored.subject, stream_seq=stored.seq,
                    num_delivered=1,
                )
            )
        return out

    async def last_seq(self, stream: str, subject: str) -> int:
        """The subject's last sequence (0: the subject is empty); wildcards allowed."""
        return self._last_matching(subject)

    def _last_matching(self, subject: str) -> int:
        if "*" not in subject and ">" not in subject:
            return self._last.get(subject, 0)
        return max((s for k, s in self._last.items() if subject_matches(subject, k)), default=0)

    async def claim_once(self, bucket: str, key: str, value: bytes) -> Claim:
        """Claim a key forever (see `EventStore.claim_once`)."""
        keys = self._claims[bucket]
        if key in keys:
            existing, revision = keys[key]
            if existing != value:
                raise ClaimConflict(key, existing)
            return Claim(created=False, value=existing, revision=revision)
        revision = sum(len(k) for k in self._claims.values()) + 1
        keys[key] = (value, revision)
        return Claim(created=True, value=value, revision=revision)

    async def read_claim(self, bucket: str, key: str) -> bytes | None:
        """The value a key was claimed with, if any."""
        found = self._claims[bucket].get(key)
        return None if found is None else found[0]
