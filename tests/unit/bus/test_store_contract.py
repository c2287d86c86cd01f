"""One contract, two event stores: the in-memory port must behave as JetStream does.

Each test runs here against `MemoryEventStore` and, re-collected in
tests/component/bus/test_store_contract.py, against `NatsEventStore` on the real broker, so
the fast shell tests exercise the same semantics the services rely on.
"""

from __future__ import annotations

from typing import Any

import pytest

from libs.bus import (
    ClaimConflict,
    ConcurrencyConflict,
    Context,
    EventStore,
    MemoryEventStore,
    Topology,
    load_from,
)
from libs.domain import batch as batch_domain
from libs.events import (
    BATCHES,
    DELIVERIES,
    OPERATIONS,
    BatchDrained,
    BatchEvent,
    BatchMemberSettled,
    BatchOpened,
    DeliveryDecided,
    DeliveryReady,
    OperationAdmitted,
    OperationCommitted,
    OperationEvent,
    OperationStarted,
)
from testkit.events import envelope


@pytest.fixture(params=["memory"])
def store(topology: Topology) -> EventStore:
    """The in-memory port; tests/component/bus/test_store_contract.py runs the same tests
    against `NatsEventStore` on the real broker."""
    return MemoryEventStore(stream=topology.stream_name(Context.OPERATIONS))


def _admitted(op: str, *, event_id: str | None = None) -> Any:
    ids: dict[str, Any] = {"event_id": event_id} if event_id else {}
    return envelope(
        OperationAdmitted(tool="provision_access", arguments={"access": op}, tenant_id="t",
                          user_id="u"),
        session_id="s1", operation_id=op, intent_key=f"ik-{op}", batch_id="b1", **ids,
    )


async def test_expected_sequence_guards_the_subject(
    store: EventStore, topology: Topology
) -> None:
    subject = topology.operation_subject("s1", "op1")
    first = await store.append(OPERATIONS, subject, _admitted("op1"), expected_last_subject_seq=0)
    with pytest.raises(ConcurrencyConflict):
        await store.append(OPERATIONS, subject, _admitted("op1"), expected_last_subject_seq=0)
    second = await store.append(
        OPERATIONS, subject, _admitted("op1"), expected_last_subject_seq=first.seq
    )
    assert second.seq > first.seq
    assert not second.duplicate


async def test_expected_sequence_is_per_subject(store: EventStore, topology: Topology) -> None:
    a = topology.operation_subject("s1", "opa")
    b = topology.operation_subject("s1", "opb")
    on_a = await store.append(OPERATIONS, a, _admitted("opa"), expected_last_subject_seq=0)
    # Another subject's append does not move this one's last sequence, and vice versa.
    await store.append(OPERATIONS, b, _admitted("opb"), expected_last_subject_seq=0)
    after = await store.append(
        OPERATIONS, a, _admitted("opa"), expected_last_subject_seq=on_a.seq
    )
    assert after.seq > on_a.seq


async def test_duplicate_message_id_is_absorbed(store: EventStore, topology: Topology) -> None:
    subject = topology.operation_subject("s1", "op1")
    env = _admitted("op1")
    first = await store.append(OPERATIONS, subject, env)
    again = await store.append(OPERATIONS, subject, env)
    # The expectation is checked first: a retry whose expectation no longer holds is
    # refused (the caller reloads), one whose expectation still holds is absorbed.
    with pytest.raises(ConcurrencyConflict):
        await store.append(OPERATIONS, subject, env, expected_last_subject_seq=0)
    retried = await store.append(
        OPERATIONS, subject, env, expected_last_subject_seq=first.seq
    )
    other_id = await store.append(OPERATIONS, subject, env, msg_id="another-id")
    assert not first.duplicate
    assert again.duplicate
    assert again.seq == first.seq
    assert retried.duplicate
    assert retried.seq == first.seq
    assert not other_id.duplicate
    assert other_id.seq > first.seq
    stream = topology.stream_name(Context.OPERATIONS)
    read = await store.read_subject(stream, subject, OPERATIONS)
    assert [i.stream_seq for i in read.items] == [first.seq, other_id.seq]


async def test_a_record_is_put_once_under_its_message_id(
    store: EventStore, topology: Topology
) -> None:
    subject = topology.dlq_subject(Context.OPERATIONS, "s1")
    first = await store.put(subject, b'{"reason":"x"}', msg_id="dlq:op1:7")
    again = await store.put(subject, b'{"reason":"x"}', msg_id="dlq:op1:7")
    other = await store.put(subject, b'{"reason":"y"}', msg_id="dlq:op1:8")
    assert not first.duplicate
    assert again.duplicate
    assert again.seq == first.seq
    assert not other.duplicate
    assert other.seq > first.seq


async def test_read_returns_one_subject_in_order(store: EventStore, topology: Topology) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    mine = topology.operation_subject("s1", "op1")
    other = topology.operation_subject("s1", "op2")
    assert (await store.read_subject(stream, mine, OPERATIONS)).items == []
    ids = []
    for n in range(3):
        env = _admitted("op1", event_id=f"ev_mine_{n}")
        await store.append(OPERATIONS, mine, env)
        await store.append(OPERATIONS, other, _admitted("op2", event_id=f"ev_other_{n}"))
        ids.append(env.event_id)
    read = await store.read_subject(stream, mine, OPERATIONS)
    assert [i.envelope.event_id for i in read.items] == ids
    # Each event lies on its kind's subject under the operation's wildcard.
    placed = topology.operation_event_subject("s1", "op1", "admitted")
    assert all(i.subject == placed for i in read.items)
    seqs = [i.stream_seq for i in read.items]
    assert seqs == sorted(seqs)
    assert read.last_seq == seqs[-1]
    wildcard = f"{topology.prefix}.operations.s1.*.*"
    both = await store.read_subject(stream, wildcard, OPERATIONS)
    assert len(both.items) == 6


def _op_event(op: str, event: OperationEvent, event_id: str) -> Any:
    return envelope(event, session_id="s1", operation_id=op, event_id=event_id)


async def test_expected_sequence_spans_every_kind_of_one_operation(
    store: EventStore, topology: Topology
) -> None:
    """Kinds lie on their own subjects, yet an operation stays one aggregate: an append of
    another kind decided from a stale load is refused; another operation's is not."""
    stream = topology.stream_name(Context.OPERATIONS)
    op = topology.operation_subject("s1", "op_kinds")
    admitted = await store.append(
        OPERATIONS, op, _admitted("op_kinds", event_id="ev_k_adm"), expected_last_subject_seq=0
    )
    started = await store.append(
        OPERATIONS, op,
        _op_event("op_kinds", OperationStarted(worker_id="w1", attempt=1), "ev_k_start"),
        expected_last_subject_seq=admitted.seq,
    )
    # Decided from the load before the start: a commit (another kind) must not slip in.
    with pytest.raises(ConcurrencyConflict) as caught:
        await store.append(
            OPERATIONS, op,
            _op_event("op_kinds", OperationCommitted(result={}), "ev_k_commit"),
            expected_last_subject_seq=admitted.seq,
        )
    assert caught.value.subject == op
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            OPERATIONS, op,
            _op_event("op_kinds", OperationStarted(worker_id="w2", attempt=1), "ev_k_start2"),
            expected_last_subject_seq=admitted.seq,
        )
    # Another operation of the same session is its own aggregate.
    other = await store.append(
        OPERATIONS, topology.operation_subject("s1", "op_kinds_other"),
        _admitted("op_kinds_other", event_id="ev_k_other"), expected_last_subject_seq=0,
    )
    assert await store.last_seq(stream, op) == started.seq
    committed = await store.append(
        OPERATIONS, op, _op_event("op_kinds", OperationCommitted(result={}), "ev_k_commit"),
        expected_last_subject_seq=started.seq,
    )
    assert committed.seq > other.seq > started.seq
    read = await store.read_subject(stream, op, OPERATIONS)
    assert [(i.stream_seq, i.subject) for i in read.items] == [
        (admitted.seq, topology.operation_event_subject("s1", "op_kinds", "admitted")),
        (started.seq, topology.operation_event_subject("s1", "op_kinds", "started")),
        (committed.seq, topology.operation_event_subject("s1", "op_kinds", "committed")),
    ]
    assert read.last_seq == await store.last_seq(stream, op) == committed.seq
    # One kind's subject alone holds only that kind.
    only = topology.operation_event_subject("s1", "op_kinds", "started")
    assert await store.last_seq(stream, only) == started.seq


async def test_last_seq_is_the_subjects_last_message(
    store: EventStore, topology: Topology
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    mine = topology.operation_subject("s1", "op_last")
    other = topology.operation_subject("s1", "op_other")
    assert await store.last_seq(stream, mine) == 0
    first = await store.append(OPERATIONS, mine, _admitted("op_last", event_id="ev_last_1"))
    later = await store.append(OPERATIONS, other, _admitted("op_other", event_id="ev_other_1"))
    assert await store.last_seq(stream, mine) == first.seq
    assert await store.last_seq(stream, other) == later.seq > first.seq


async def test_claim_once(store: EventStore) -> None:
    first = await store.claim_once("intents", "ik-1", b"op-1")
    again = await store.claim_once("intents", "ik-1", b"op-1")
    assert first.created
    assert not again.created
    assert again.value == b"op-1"
    assert again.revision == first.revision
    with pytest.raises(ClaimConflict) as caught:
        await store.claim_once("intents", "ik-1", b"op-2")
    assert caught.value.existing == b"op-1"
    assert await store.read_claim("intents", "ik-1") == b"op-1"
    assert await store.read_claim("intents", "ik-unknown") is None
    # Buckets are separate key spaces.
    assert (await store.claim_once("deliveries", "ik-1", b"other")).created


_DRAINED = BatchDrained(final_delivery_id="d1", committed=2, failed=0)


def _batch_event(event: BatchEvent, event_id: str) -> Any:
    return envelope(event, session_id="s1", batch_id="b_kinds", event_id=event_id)


async def test_a_batch_is_one_aggregate_over_its_kinds_and_loads_whole(
    store: EventStore, topology: Topology
) -> None:
    """A batch's events lie on their kinds' subjects (so a consumer can take `opened` only);
    its wildcard loads it whole, and two writers deciding from one load still conflict."""
    stream = topology.stream_name(Context.BATCHES)
    batch = topology.batch_subject("s1", "b_kinds")
    opened = await store.append(
        BATCHES, batch, _batch_event(BatchOpened(operation_ids=("o1", "o2")), "ev_b_open"),
        expected_last_subject_seq=0,
    )
    settled = await store.append(
        BATCHES, batch,
        _batch_event(BatchMemberSettled(member_operation_id="o1", status="committed"), "ev_b_s1"),
        expected_last_subject_seq=opened.seq,
    )
    # A second writer settling the other member from the load before the first settlement.
    with pytest.raises(ConcurrencyConflict) as caught:
        await store.append(
            BATCHES, batch,
            _batch_event(BatchMemberSettled(member_operation_id="o2", status="committed"),
                         "ev_b_s2"),
            expected_last_subject_seq=opened.seq,
        )
    assert caught.value.subject == batch
    # Nor a drain (another kind) from that stale load.
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            BATCHES, batch, _batch_event(_DRAINED, "ev_b_drain"),
            expected_last_subject_seq=opened.seq,
        )
    second = await store.append(
        BATCHES, batch,
        _batch_event(BatchMemberSettled(member_operation_id="o2", status="committed"), "ev_b_s2"),
        expected_last_subject_seq=settled.seq,
    )
    drained = await store.append(
        BATCHES, batch, _batch_event(_DRAINED, "ev_b_drain"),
        expected_last_subject_seq=second.seq,
    )
    loaded = await load_from(store, stream, batch, BATCHES, batch_domain.evolve)
    assert loaded.state is not None
    assert loaded.state.members == ("o1", "o2")
    assert dict(loaded.state.settled) == {"o1": "committed", "o2": "committed"}
    assert loaded.state.closed
    assert loaded.last_seq == await store.last_seq(stream, batch) == drained.seq
    read = await store.read_subject(stream, batch, BATCHES)
    assert [i.subject for i in read.items] == [
        topology.batch_event_subject("s1", "b_kinds", kind)
        for kind in ("opened", "member_settled", "member_settled", "drained")
    ]


def _ready(delivery_id: str, event_id: str) -> Any:
    return envelope(
        DeliveryReady(kind="final", text="Done.", short_text="Done", source_operation_ids=("o",)),
        session_id="s1", batch_id="b1", delivery_id=delivery_id, event_id=event_id,
    )


async def test_a_second_delivery_ready_is_refused_over_every_kind_of_the_delivery(
    store: EventStore, topology: Topology
) -> None:
    """`delivery.ready` with expected sequence 0 is what makes a second closing impossible
    beyond the duplicate window: the check spans all of the delivery's kinds."""
    stream = topology.stream_name(Context.DELIVERIES)
    delivery = topology.delivery_subject("s1", "d_kinds")
    ready = await store.append(
        DELIVERIES, delivery, _ready("d_kinds", "d_kinds-ready"), expected_last_subject_seq=0
    )
    # The same closing again (a restart past the window): refused, not a duplicate.
    with pytest.raises(ConcurrencyConflict) as caught:
        await store.append(
            DELIVERIES, delivery, _ready("d_kinds", "d_kinds-ready"), expected_last_subject_seq=0
        )
    assert caught.value.subject == delivery
    with pytest.raises(ConcurrencyConflict):
        await store.append(
            DELIVERIES, delivery, _ready("d_kinds", "d_kinds-ready-2"),
            expected_last_subject_seq=0,
        )
    decided_env = envelope(
        DeliveryDecided(decision="deliver_now", reason="channel_idle", mode="proactive"),
        session_id="s1", delivery_id="d_kinds", event_id="d_kinds-decided",
    )
    # Another kind on an "empty" delivery: the delivery is not empty.
    with pytest.raises(ConcurrencyConflict):
        await store.append(DELIVERIES, delivery, decided_env, expected_last_subject_seq=0)
    decided = await store.append(
        DELIVERIES, delivery, decided_env, expected_last_subject_seq=ready.seq
    )
    # Another delivery is its own aggregate.
    other = topology.delivery_subject("s1", "d_kinds_other")
    assert not (
        await store.append(DELIVERIES, other, _ready("d_kinds_other", "dko-ready"),
                           expected_last_subject_seq=0)
    ).duplicate
    read = await store.read_subject(stream, delivery, DELIVERIES)
    assert [(i.stream_seq, i.subject) for i in read.items] == [
        (ready.seq, topology.delivery_event_subject("s1", "d_kinds", "ready")),
        (decided.seq, topology.delivery_event_subject("s1", "d_kinds", "decided")),
    ]
    assert await store.last_seq(stream, delivery) == decided.seq
