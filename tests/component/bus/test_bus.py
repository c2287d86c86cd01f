"""The JetStream layer against a real broker: dedup, concurrency, claims, replay, dead letters."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from libs.admission import LoadView
from libs.bus import (
    DEAD_LETTER_DECODER,
    ClaimConflict,
    ConcurrencyConflict,
    Context,
    DurableConsumer,
    Poison,
    Received,
    Topology,
    claim_once,
    ensure_consumer,
    last_subject_seq,
    position,
    replay,
    spec_for,
    stream_last_seq,
)
from libs.bus.store import append
from libs.config import BusSettings
from libs.domain import OperationState, OpStatus, Projection, operation
from libs.events import (
    OPERATIONS,
    WORK,
    ExecuteOperation,
    OperationAdmitted,
    OperationAttempted,
    OperationCommitted,
    OperationEvent,
    OperationStarted,
)
from testkit.events import envelope


def _admitted(session: str, op: str) -> Any:
    return envelope(
        OperationAdmitted(
            tool="provision_access", arguments={"access": op}, tenant_id="t", user_id="u"
        ),
        session_id=session,
        operation_id=op,
        intent_key=f"ik-{op}",
        batch_id="b1",
    )


async def test_same_message_id_is_stored_once(js: JetStreamContext, topology: Topology) -> None:
    subject = topology.operation_subject("s1", "op1")
    env = _admitted("s1", "op1")
    first = await append(js, OPERATIONS, subject, env)
    second = await append(js, OPERATIONS, subject, env)
    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq
    info = await js.stream_info(topology.stream_name(Context.OPERATIONS))
    assert info.state.messages == 1


async def test_expected_last_subject_sequence_rejects_a_stale_writer(
    js: JetStreamContext, topology: Topology
) -> None:
    subject = topology.operation_subject("s1", "op1")
    first = await append(
        js, OPERATIONS, subject, _admitted("s1", "op1"), expected_last_subject_seq=0
    )
    started = envelope(
        OperationStarted(worker_id="w1", attempt=1), session_id="s1", operation_id="op1"
    )
    await append(js, OPERATIONS, subject, started, expected_last_subject_seq=first.seq)
    # A second writer that loaded the same state loses, and nothing is written.
    racing = envelope(
        OperationStarted(worker_id="w2", attempt=1), session_id="s1", operation_id="op1"
    )
    with pytest.raises(ConcurrencyConflict):
        await append(js, OPERATIONS, subject, racing, expected_last_subject_seq=first.seq)
    stream = topology.stream_name(Context.OPERATIONS)
    assert await last_subject_seq(js, stream, subject) == first.seq + 1
    events = await replay(js, stream, subject, OPERATIONS)
    assert [type(r.envelope.event).__name__ for r in events.items] == [
        "OperationAdmitted",
        "OperationStarted",
    ]


async def test_claim_once_same_value_is_idempotent_other_value_is_an_error(
    js: JetStreamContext, topology: Topology
) -> None:
    kv = await js.key_value(topology.bucket("intents"))
    first = await claim_once(kv, "intent-abc", b"op1|hash-of-args")
    again = await claim_once(kv, "intent-abc", b"op1|hash-of-args")
    assert first.created
    assert not again.created
    assert again.value == b"op1|hash-of-args"
    with pytest.raises(ClaimConflict) as info:
        await claim_once(kv, "intent-abc", b"op2|other-args")
    assert info.value.existing == b"op1|hash-of-args"


async def test_replay_rebuilds_exactly_the_live_projection(
    js: JetStreamContext, topology: Topology, bus_settings: BusSettings
) -> None:
    def key(env: Any) -> str:
        return str(env.operation_id)

    live: Projection[OperationState, OperationEvent] = Projection(operation.evolve, key)
    seen = asyncio.Event()
    expected = 0

    async def handle(received: Received[OperationEvent]) -> None:
        live.apply(received.envelope, received.stream_seq)
        if expected and received.stream_seq >= expected:
            seen.set()

    consumer = DurableConsumer(
        js,
        spec_for(topology, Context.OPERATIONS, durable="proj", ack_wait_s=2.0, max_deliver=3),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
    )
    task = asyncio.create_task(consumer.run())
    for s in range(3):
        for o in range(4):
            session, op = f"s{s}", f"op{s}x{o}"
            subject = topology.operation_subject(session, op)
            await append(js, OPERATIONS, subject, _admitted(session, op))
            await append(
                js,
                OPERATIONS,
                subject,
                envelope(
                    OperationStarted(worker_id="w", attempt=1), session_id=session, operation_id=op
                ),
            )
            await append(
                js,
                OPERATIONS,
                subject,
                envelope(
                    OperationAttempted(attempt=1, outcome="success", http_status=201),
                    session_id=session,
                    operation_id=op,
                ),
            )
            if o % 2 == 0:
                await append(
                    js,
                    OPERATIONS,
                    subject,
                    envelope(
                        OperationCommitted(result={"ok": True}), session_id=session, operation_id=op
                    ),
                )
    info = await js.stream_info(topology.stream_name(Context.OPERATIONS))
    expected = info.state.last_seq
    if live.last_seq and max(live.last_seq.values()) >= expected:
        seen.set()
    await asyncio.wait_for(seen.wait(), timeout=10)
    consumer.stop()
    await task

    rebuilt: Projection[OperationState, OperationEvent] = Projection(operation.evolve, key)
    history = await replay(
        js,
        topology.stream_name(Context.OPERATIONS),
        topology.context_filter(Context.OPERATIONS),
        OPERATIONS,
    )
    for item in history.items:
        rebuilt.apply(item.envelope, item.stream_seq)
    # Redelivering everything again changes nothing.
    for item in history.items:
        rebuilt.apply(item.envelope, item.stream_seq)
    assert rebuilt.states == live.states
    assert len(rebuilt.states) == 12
    assert sum(1 for s in rebuilt.states.values() if s.status is OpStatus.COMMITTED) == 6
    assert all(s.attempts == 1 for s in rebuilt.states.values())
    assert not rebuilt.refused


async def test_one_session_replays_alone_and_in_order(
    js: JetStreamContext, topology: Topology
) -> None:
    for session in ("sa", "sb"):
        for i in range(3):
            await append(
                js,
                OPERATIONS,
                topology.operation_subject(session, f"o{i}"),
                _admitted(session, f"o{i}"),
            )
    replayed = await replay(
        js,
        topology.stream_name(Context.OPERATIONS),
        topology.session_filter(Context.OPERATIONS, "sa"),
        OPERATIONS,
    )
    assert [r.envelope.session_id for r in replayed.items] == ["sa"] * 3
    assert [r.envelope.operation_id for r in replayed.items] == ["o0", "o1", "o2"]
    seqs = [r.stream_seq for r in replayed.items]
    assert seqs == sorted(seqs)


async def test_poison_message_is_dead_lettered_while_other_sessions_flow(
    js: JetStreamContext, topology: Topology, bus_settings: BusSettings
) -> None:
    handled: list[str] = []
    attempts: dict[str, int] = {}
    done = asyncio.Event()

    async def handle(received: Received[OperationEvent]) -> None:
        op = str(received.envelope.operation_id)
        attempts[op] = attempts.get(op, 0) + 1
        if received.envelope.session_id == "poisoned":
            raise RuntimeError("this handler always fails for the poisoned session")
        handled.append(op)
        if len(handled) == 5:
            done.set()

    consumer = DurableConsumer(
        js,
        spec_for(topology, Context.OPERATIONS, durable="worker", ack_wait_s=2.0, max_deliver=3),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
        redelivery_backoff_s=0.05,
    )
    task = asyncio.create_task(consumer.run())
    await append(
        js, OPERATIONS, topology.operation_subject("poisoned", "bad"), _admitted("poisoned", "bad")
    )
    # Garbage that cannot even be decoded goes straight to the dead-letter stream.
    await js.publish(
        topology.operation_event_subject("poisoned", "garbage", "admitted"), b"{not json"
    )
    for i in range(5):
        await append(
            js,
            OPERATIONS,
            topology.operation_subject(f"ok{i}", f"good{i}"),
            _admitted(f"ok{i}", f"good{i}"),
        )
    await asyncio.wait_for(done.wait(), timeout=10)

    dlq_stream = topology.stream_name(Context.DLQ)
    for _ in range(100):
        info = await js.stream_info(dlq_stream)
        if info.state.messages >= 2:
            break
        await asyncio.sleep(0.05)
    consumer.stop()
    await task

    assert sorted(handled) == [f"good{i}" for i in range(5)]
    assert attempts["bad"] == bus_settings.max_deliver
    letters = []
    for seq in range(1, 3):
        raw = await js.get_msg(dlq_stream, seq)
        letters.append(DEAD_LETTER_DECODER.decode(raw.data or b""))
    # `<prefix>.operations.<session>.<operation>.<kind>`: keyed by the operation.
    reasons = {letter.source_subject.split(".")[3]: letter for letter in letters}
    assert reasons["garbage"].reason == "malformed"
    assert reasons["garbage"].num_delivered == 1
    assert reasons["bad"].reason == "max_deliver"
    assert "always fails" in reasons["bad"].error
    assert reasons["bad"].num_delivered == bus_settings.max_deliver
    # Nothing is left unacknowledged: the consumer moved past the poison.
    cinfo = await js.consumer_info(topology.stream_name(Context.OPERATIONS), "worker")
    assert cinfo.num_ack_pending == 0
    assert cinfo.num_pending == 0


async def test_poison_is_removed_from_the_work_queue(
    js: JetStreamContext, topology: Topology
) -> None:
    async def handle(received: Received[Any]) -> None:
        raise Poison("operation unknown to this deployment")

    consumer = DurableConsumer(
        js,
        spec_for(topology, Context.WORK, durable="work", ack_wait_s=2.0, max_deliver=3),
        WORK,
        handle,
        topology=topology,
        source=Context.WORK,
    )
    task = asyncio.create_task(consumer.run())
    await append(
        js,
        WORK,
        topology.work_subject("s1", "op1"),
        envelope(ExecuteOperation(), session_id="s1", operation_id="op1"),
    )
    work_stream = topology.stream_name(Context.WORK)
    for _ in range(100):
        if (await js.stream_info(work_stream)).state.messages == 0:
            break
        await asyncio.sleep(0.05)
    consumer.stop()
    await task
    assert (await js.stream_info(work_stream)).state.messages == 0
    dlq = await js.get_msg(topology.stream_name(Context.DLQ), 1)
    letter = DEAD_LETTER_DECODER.decode(dlq.data or b"")
    assert letter.reason == "poison"
    assert letter.error == "operation unknown to this deployment"
    assert WORK.decode(letter.payload).operation_id == "op1"


async def test_events_arriving_one_by_one_share_one_standing_pull_request(
    js: JetStreamContext, topology: Topology
) -> None:
    """Each wave of deliveries must not cost its own pull requests: fetch made two per wave
    (a no_wait probe, then a lingering request), 40 for 20 events arriving one at a time."""
    requests: list[bytes] = []
    durable = "standing"
    api = f"$JS.API.CONSUMER.MSG.NEXT.{topology.stream_name(Context.OPERATIONS)}.{durable}"

    async def count(msg: Any) -> None:
        requests.append(msg.data)

    watcher = await js._nc.subscribe(api, cb=count)
    handled: list[int] = []
    done = asyncio.Event()

    async def handle(received: Received[OperationEvent]) -> None:
        handled.append(received.stream_seq)
        if len(handled) == 20:
            done.set()

    consumer = DurableConsumer(
        js,
        spec_for(topology, Context.OPERATIONS, durable=durable, ack_wait_s=2.0, max_deliver=3),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
    )
    task = asyncio.create_task(consumer.run())
    try:
        await consumer.ready.wait()
        for i in range(20):
            op = f"one{i}"
            await append(js, OPERATIONS, topology.operation_subject("s1", op), _admitted("s1", op))
            await asyncio.sleep(0.03)
        await asyncio.wait_for(done.wait(), 10)
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
        await watcher.unsubscribe()
    assert sorted(handled) == handled
    assert len(set(handled)) == 20
    # One request lives for seconds and covers a batch; a few at most in this ~1 s.
    assert len(requests) <= 4, requests


async def test_a_consumer_filtered_by_kind_gets_only_those_and_a_changed_filter_is_applied(
    js: JetStreamContext, topology: Topology
) -> None:
    """The broker delivers only the kinds a consumer asks for, and declaring the durable
    again with other kinds (a new version of its service) changes what it is delivered."""
    subject = topology.operation_subject("sk", "opk")
    seq = 0
    for event in (
        _admitted("sk", "opk").event,
        OperationStarted(worker_id="w1", attempt=1),
        OperationAttempted(attempt=1, outcome="success"),
        OperationCommitted(result={}),
    ):
        env = envelope(event, session_id="sk", operation_id="opk")
        seq = (await append(js, OPERATIONS, subject, env, expected_last_subject_seq=seq)).seq
    stream = topology.stream_name(Context.OPERATIONS)

    def spec(*kinds: Any) -> Any:
        return spec_for(
            topology, Context.OPERATIONS, durable="kinds", ack_wait_s=2.0, max_deliver=3,
            filter_subjects=topology.operation_kinds_filter(kinds),
        )

    await ensure_consumer(js, spec(OperationAdmitted))
    assert (await js.consumer_info(stream, "kinds")).num_pending == 1
    wider = spec(OperationAdmitted, OperationCommitted)
    await ensure_consumer(js, wider)
    info = await js.consumer_info(stream, "kinds")
    assert info.config.filter_subjects == list(wider.filter_subjects)
    assert info.num_pending == 2

    seen: list[tuple[str, str]] = []
    done = asyncio.Event()

    async def handle(received: Received[OperationEvent]) -> None:
        seen.append((received.envelope.event.__struct_config__.tag, received.subject))
        if len(seen) == 2:
            done.set()

    consumer = DurableConsumer(
        js, wider, OPERATIONS, handle, topology=topology, source=Context.OPERATIONS
    )
    task = asyncio.create_task(consumer.run())
    try:
        await asyncio.wait_for(done.wait(), 10)
        await asyncio.sleep(0.3)  # room for anything that should not come
    finally:
        consumer.stop()
        await asyncio.wait_for(task, 10)
    assert seen == [
        ("operation.admitted", topology.operation_event_subject("sk", "opk", "admitted")),
        ("operation.committed", topology.operation_event_subject("sk", "opk", "committed")),
    ]


async def test_a_stream_s_last_sequence_is_read_from_its_info_alone(
    js: JetStreamContext, topology: Topology
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    before = (await js.stream_info(stream)).state.last_seq
    assert await stream_last_seq(js, stream, timeout_s=5) == before
    for op in ("op-last-1", "op-last-2"):
        subject = topology.operation_subject("s-last", op)
        await append(js, OPERATIONS, subject, _admitted("s-last", op))
    assert await stream_last_seq(js, stream, timeout_s=5) == before + 2
    assert (await js.stream_info(stream)).state.last_seq == before + 2
    # An error of the API is nats-py's, as `stream_info` raises it.
    with pytest.raises(NotFoundError):
        await stream_last_seq(js, f"{stream}_MISSING", timeout_s=5)


async def test_a_delivery_s_position_agrees_with_nats_py_s_metadata(
    js: JetStreamContext, topology: Topology
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    ops = ("op-pos-1", "op-pos-2", "op-pos-3")
    for op in ops:
        subject = topology.operation_subject("s-pos", op)
        await append(js, OPERATIONS, subject, _admitted("s-pos", op))
    sub = await js.pull_subscribe(
        topology.context_filter(Context.OPERATIONS), durable="pos-test", stream=stream
    )
    try:
        first = await sub.fetch(3, timeout=5)
        redelivered = first[0]
        await redelivered.nak()
        for msg in first[1:]:
            await msg.ack()
        again = await sub.fetch(1, timeout=5)
    finally:
        await js.delete_consumer(stream, "pos-test")
    seen = [*first, *again]
    assert [position(m.reply).num_delivered for m in seen] == [1, 1, 1, 2]
    for msg in seen:
        meta = msg.metadata
        assert position(msg.reply) == (
            meta.stream, meta.sequence.stream, meta.num_delivered, meta.num_pending
        )


async def test_the_load_view_s_follower_feeds_other_folds_each_event_once(
    js: JetStreamContext, topology: Topology
) -> None:
    # One event before the follower starts (replayed), two after it (live).
    first = topology.operation_subject("s-feed", "op-feed-1")
    replayed = await append(js, OPERATIONS, first, _admitted("s-feed", "op-feed-1"))
    seen: list[tuple[str, int]] = []
    view = LoadView()
    await view.follow(js, topology, also=(lambda env, seq: seen.append((env.event_id, seq)),))
    try:
        await asyncio.wait_for(view.caught_up.wait(), 5)
        second = topology.operation_subject("s-feed", "op-feed-2")
        ack = await append(js, OPERATIONS, second, _admitted("s-feed", "op-feed-2"))
        started = envelope(
            OperationStarted(worker_id="w1", attempt=1),
            session_id="s-feed",
            operation_id="op-feed-2",
        )
        last = await append(js, OPERATIONS, second, started)
        for _ in range(100):
            if len(seen) >= 3:
                break
            await asyncio.sleep(0.02)
    finally:
        await view.close()
    assert [seq for _, seq in seen] == [replayed.seq, ack.seq, last.seq]
    assert seen[-1][0] == started.event_id
    # The view's own fold saw the same events: the second operation is running.
    running = view.projection.get("op-feed-2")
    assert running is not None
    assert running.status is OpStatus.RUNNING


async def test_a_subject_s_last_sequence_matches_the_stream_s_last_message(
    js: JetStreamContext, topology: Topology
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    subject = topology.operation_subject("s-lastmsg", "op-lastmsg")
    assert await last_subject_seq(js, stream, subject) == 0
    await append(js, OPERATIONS, subject, _admitted("s-lastmsg", "op-lastmsg"))
    other = topology.operation_subject("s-lastmsg", "op-other")
    await append(js, OPERATIONS, other, _admitted("s-lastmsg", "op-other"))
    started = envelope(
        OperationStarted(worker_id="w", attempt=1),
        session_id="s-lastmsg",
        operation_id="op-lastmsg",
    )
    last = await append(js, OPERATIONS, subject, started)
    # The subject is a wildcard over the operation's kinds: its last is `started`, not the
    # other operation's later-or-earlier admission.
    assert await last_subject_seq(js, stream, subject) == last.seq
    assert (await js.get_last_msg(stream, subject)).seq == last.seq
    assert await last_subject_seq(js, stream, other) == last.seq - 1
