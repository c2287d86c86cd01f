"""Listing dead letters and redriving them.

The DLQ stream is a limits stream that denies deletes, so a dead letter is never removed.
A redrive is recorded instead as a small `Redriven` marker on `<prefix>.dlq.redriven.<session>`
(inside the DLQ stream, next to the letters it refers to); a listing joins the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from libs.bus import (
    DEAD_LETTER_DECODER,
    Context,
    DeadLetter,
    EventStore,
    Repository,
    Topology,
    aggregates,
)
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.events import Envelope, ExecuteOperation, WorkCommand

REDRIVEN = "redriven"


class Redriven(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The record that one dead letter was redriven, where to and with which message id."""

    dlq_seq: int
    target_subject: str
    msg_id: str
    action: str
    redriven_at: datetime


_REDRIVEN_DECODER = msgspec.json.Decoder(Redriven)


class OperatorError(Exception):
    """A request the operator tool refuses, with the reason to show (exit status 2)."""


@dataclass(frozen=True, slots=True)
class Letter:
    """One dead letter as an operator sees it."""

    dlq_seq: int
    source: str
    session_id: str
    operation_id: str | None
    record: DeadLetter
    redriven: Redriven | None = None

    def as_dict(self) -> dict[str, object]:
        """The JSON shape of `holdline dlq list --json`."""
        r = self.record
        return {
            "dlq_seq": self.dlq_seq,
            "source": self.source,
            "source_stream": r.source_stream,
            "source_subject": r.source_subject,
            "source_seq": r.source_seq,
            "consumer": r.consumer,
            "reason": r.reason,
            "error": r.error,
            "num_delivered": r.num_delivered,
            "dead_lettered_at": r.dead_lettered_at.isoformat(),
            "session_id": self.session_id,
            "operation_id": self.operation_id,
            "redriven_at": self.redriven.redriven_at.isoformat() if self.redriven else None,
        }


def _ids(topology: Topology, source: str, subject: str) -> tuple[str, str | None]:
    """Session and operation ids from a source subject (`<prefix>.<ctx>.<session>.<id>`)."""
    parts = subject.split(".")
    session = parts[2] if len(parts) > 2 and parts[0] == topology.prefix else "unknown"
    op = parts[3] if source in ("operations", "work") and len(parts) > 3 else None
    return session, op


async def read_letters(
    js: JetStreamContext, topology: Topology, source: str | None = None
) -> list[Letter]:
    """Every dead letter (of one source context, if given), with its redrive marker if any."""
    stream = topology.stream_name(Context.DLQ)
    letters: list[Letter] = []
    markers: dict[int, Redriven] = {}
    seq = 1
    while True:
        try:
            raw = await js.get_msg(
                stream, seq=seq, subject=topology.context_filter(Context.DLQ), next=True
            )
        except NotFoundError:
            break
        seq = int(raw.seq or seq) + 1
        subject = raw.subject or ""
        parts = subject.split(".")
        kind = parts[2] if len(parts) > 3 else ""
        if kind == REDRIVEN:
            marker = _REDRIVEN_DECODER.decode(raw.data or b"")
            markers[marker.dlq_seq] = marker
            continue
        if source is not None and kind != source:
            continue
        record = DEAD_LETTER_DECODER.decode(raw.data or b"")
        session, op = _ids(topology, kind, record.source_subject)
        letters.append(Letter(seq - 1, kind, session, op, record))
    return [
        Letter(x.dlq_seq, x.source, x.session_id, x.operation_id, x.record, markers.get(x.dlq_seq))
        for x in letters
    ]


async def redrive(
    js: JetStreamContext,
    store: EventStore,
    topology: Topology,
    dlq_seq: int,
    *,
    force: bool = False,
    clock: Clock = SYSTEM_CLOCK,
    ids: Ids = RANDOM_IDS,
) -> Redriven:
    """Send a dead letter's work back, then record that it was redriven.

    - work: the command is republished to its subject with a NEW message id, so the broker's
      duplicate window does not drop it.
    - operations: old events are never appended again (history is immutable); a fresh
      `work.execute` asks a worker to load the operation and carry on from its state.
    Other streams hold immutable events read by replay, so their letters are refused.
    Letters are read from the DLQ stream (`js`); everything written goes through `store`.
    """
    letters = {x.dlq_seq: x for x in await read_letters(js, topology)}
    letter = letters.get(dlq_seq)
    if letter is None:
        raise OperatorError(f"no dead letter at DLQ sequence {dlq_seq}")
    if letter.redriven is not None and not force:
        raise OperatorError(
            f"dead letter {dlq_seq} was already redriven at "
            f"{letter.redriven.redriven_at.isoformat()} (use --force to send it again)"
        )
    msg_id = f"redrive:{dlq_seq}:{ids.new('msg')}"
    now = clock.now()
    if letter.source == Context.WORK.value:
        target = letter.record.source_subject
        await store.put(target, letter.record.payload, msg_id=msg_id)
        action = "republished work command"
    elif letter.source == Context.OPERATIONS.value:
        target, action = await _execute_again(
            store, topology, letter, dlq_seq, msg_id, now=now, clock=clock, ids=ids
        )
    else:
        raise OperatorError(
            f"dead letter {dlq_seq} comes from the {letter.source} stream: its events are "
            "immutable history and are not appended twice; fix the consumer and let it replay"
        )
    marker = Redriven(
        dlq_seq=dlq_seq,
        target_subject=target,
        msg_id=msg_id,
        action=action,
        redriven_at=now,
    )
    await store.put(
        f"{topology.prefix}.dlq.{REDRIVEN}.{letter.session_id}",
        msgspec.json.encode(marker),
        msg_id=f"marker:{msg_id}",
    )
    return marker


async def _execute_again(
    store: EventStore, topology: Topology, letter: Letter, dlq_seq: int, msg_id: str, *,
    now: datetime, clock: Clock, ids: Ids,
) -> tuple[str, str]:
    if letter.operation_id is None:
        raise OperatorError(f"dead letter {dlq_seq} names no operation")
    operations = Repository(store, aggregates.operations(topology), clock=clock, ids=ids)
    loaded = await operations.load(
        topology.operation_subject(letter.session_id, letter.operation_id)
    )
    state = loaded.state
    if state is None:
        raise OperatorError(f"operation {letter.operation_id} has no events")
    if state.terminal:
        raise OperatorError(
            f"operation {letter.operation_id} is {state.status.value}: a terminal operation "
            "does not run again (admit a new one)"
        )
    target = topology.work_subject(letter.session_id, letter.operation_id)
    command: Envelope[WorkCommand] = Envelope(
        event_id=f"work.execute:{letter.operation_id}:redrive:{dlq_seq}",
        occurred_at=now,
        session_id=letter.session_id,
        operation_id=letter.operation_id,
        event=ExecuteOperation(),
    )
    work = Repository(store, aggregates.work(topology), clock=clock, ids=ids)
    await work.record(target, command, msg_id=msg_id)
    return target, f"work.execute for an operation in {state.status.value}"
