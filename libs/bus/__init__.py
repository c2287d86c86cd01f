"""The JetStream layer: topology, declaration, appends, create-once claims, consumers, replay."""

from . import aggregates
from .aggregate import Loaded, load_from
from .codecs import EVENT_CODECS
from .connection import connect
from .consumer import DurableConsumer
from .deadletter import DEAD_LETTER_DECODER, DeadLetter
from .declare import (
    ConsumerSpec,
    ensure_buckets,
    ensure_consumer,
    ensure_stream,
    ensure_streams,
    spec_for,
)
from .handling import Handler, Poison, Received
from .memory import MemoryEventStore
from .ports import EventStore
from .position import Position, position
from .replay import (
    Replayed,
    last_subject_seq,
    read_subject,
    replay,
    replay_owned,
    stream_last_seq,
)
from .repository import (
    CONFLICT_RETRY,
    Aggregate,
    ConflictRetry,
    FoldedSource,
    Repository,
    StateSource,
    TooManyConflicts,
    Written,
)
from .store import (
    Appended,
    Claim,
    ClaimConflict,
    ConcurrencyConflict,
    ConnectedEventStore,
    NatsEventStore,
    appended_to_empty,
    claim_once,
    read_claim,
)
from .topology import BUCKETS, Context, InvalidSubjectToken, StreamSpec, Topology, token

__all__ = [
    "BUCKETS",
    "CONFLICT_RETRY",
    "DEAD_LETTER_DECODER",
    "EVENT_CODECS",
    "Aggregate",
    "Appended",
    "Claim",
    "ClaimConflict",
    "ConcurrencyConflict",
    "ConflictRetry",
    "ConnectedEventStore",
    "ConsumerSpec",
    "Context",
    "DeadLetter",
    "DurableConsumer",
    "EventStore",
    "FoldedSource",
    "Handler",
    "InvalidSubjectToken",
    "Loaded",
    "MemoryEventStore",
    "NatsEventStore",
    "Poison",
    "Position",
    "Received",
    "Replayed",
    "Repository",
    "StateSource",
    "StreamSpec",
    "TooManyConflicts",
    "Topology",
    "Written",
    "aggregates",
    "appended_to_empty",
    "claim_once",
    "connect",
    "ensure_buckets",
    "ensure_consumer",
    "ensure_stream",
    "ensure_streams",
    "last_subject_seq",
    "load_from",
    "position",
    "read_claim",
    "read_subject",
    "replay",
    "replay_owned",
    "spec_for",
    "stream_last_seq",
    "token",
]
