"""The operator tools, run as the real `holdline` command against a real broker."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from nats.js import JetStreamContext

from libs.bus import Context, DeadLetter, Topology, read_subject
from libs.events import (
    OPERATIONS,
    WORK,
    Envelope,
    OperationAdmitted,
    OperationAttempted,
    OperationCommitted,
    OperationEvent,
    OperationFailedFinal,
    OperationRejected,
    OperationStarted,
    OperationUnknown,
)
from libs.events.work import ExecuteOperation, WorkCommand
from testkit.events import envelope
from testkit.processes import Broker
from testkit.writer import append

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True, slots=True)
class Ran:
    code: int
    out: str
    err: str


Holdline = Callable[..., Awaitable[Ran]]


@pytest.fixture(name="run")
def holdline(broker: Broker, prefix: str) -> Holdline:
    """Run `python -m libs.cli ...` as a subprocess pointed at this test's prefix."""
    env = {**os.environ, "NATS_URL": broker.url, "HOLDLINE_PREFIX": prefix}

    async def run(*argv: str) -> Ran:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "libs.cli",
            *argv,
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=20)
        return Ran(proc.returncode or 0, out.decode(), err.decode())

    return run


async def _op(
    js: JetStreamContext, topology: Topology, session: str, op: str, *events: OperationEvent
) -> int:
    """Append an operation's events in order, each with the expected last subject sequence."""
    subject = topology.operation_subject(session, op)
    seq = 0
    for event in events:
        env = envelope(event, session_id=session, operation_id=op, batch_id="b1")
        seq = (await append(js, OPERATIONS, subject, env, expected_last_subject_seq=seq)).seq
    return seq


def _unknown() -> tuple[OperationEvent, ...]:
    return (
        OperationAdmitted(
            tool="transfer", arguments={"amount": 5}, tenant_id="t", user_id="u", idempotent=False
        ),
        OperationStarted(worker_id="w1", attempt=1),
        OperationAttempted(attempt=1, outcome="timeout_after_send"),
        OperationUnknown(reason="timeout after send"),
    )


async def _letter(
    js: JetStreamContext,
    topology: Topology,
    source: Context,
    subject: str,
    payload: bytes,
    *,
    reason: str = "max_deliver",
) -> int:
    """Store a dead letter the way the consumer and the worker do; returns its DLQ sequence."""
    record = DeadLetter(
        source_stream=topology.stream_name(source),
        source_subject=subject,
        source_seq=7,
        consumer="operation-worker-work",
        num_delivered=3,
        reason=reason,
        error="RuntimeError('boom')",
        payload=payload,
        dead_lettered_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    ack = await js.publish(
        topology.dlq_subject(source, topology.session_of(subject)), msgspec.json.encode(record)
    )
    return ack.seq


async def test_dlq_list_shows_letters_with_ids_and_filters(
    js: JetStreamContext, topology: Topology, run: Holdline
) -> None:
    empty = await run("dlq", "list")
    assert empty.code == 0
    assert "no dead letters" in empty.out
    work_subject = topology.work_subject("s1", "op1")
    await _letter(js, topology, Context.WORK, work_subject, b"{}")
    op_subject = topology.operation_subject("s2", "op2")
    await _letter(js, topology, Context.OPERATIONS, op_subject, b"[]", reason="business_error")

    text = await run("dlq", "list")
    assert text.code == 0, text.err
    assert "#1 work session=s1 operation=op1" in text.out
    assert "#2 operations session=s2 operation=op2" in text.out
    assert "reason: business_error" in text.out

    listed = await run("dlq", "list", "--stream", "operations", "--json")
    rows = json.loads(listed.out)
    assert [r["operation_id"] for r in rows] == ["op2"]
    assert rows[0]["session_id"] == "s2"
    assert rows[0]["source_subject"] == op_subject
    assert rows[0]["num_delivered"] == 3
    assert rows[0]["consumer"] == "operation-worker-work"
    assert rows[0]["error"] == "RuntimeError('boom')"
    assert rows[0]["redriven_at"] is None


async def test_redrive_work_republishes_with_a_new_message_id_once(
    js: JetStreamContext, topology: Topology, run: Holdline
) -> None:
    stream = topology.stream_name(Context.WORK)
    subject = topology.work_subject("s1", "op1")
    command: Envelope[WorkCommand] = envelope(
        ExecuteOperation(), session_id="s1", operation_id="op1"
    )
    msg_id = "work.execute:op1"
    first = await append(js, WORK, subject, command, msg_id=msg_id)
    # The worker consumed it and gave up: gone from the work queue, stored in the DLQ.
    await js.delete_msg(stream, first.seq)
    seq = await _letter(js, topology, Context.WORK, subject, WORK.encode(command))

    done = await run("dlq", "redrive", str(seq))
    assert done.code == 0, done.err
    assert "republished work command" in done.out
    raw = await js.get_last_msg(stream, subject)
    assert raw.data == WORK.encode(command)
    headers = raw.headers or {}
    assert headers["Nats-Msg-Id"].startswith(f"redrive:{seq}:")

    again = await run("dlq", "redrive", str(seq))
    assert again.code == 2
    assert "already redriven" in again.err
    assert (await js.stream_info(stream)).state.messages == 1

    listed = json.loads((await run("dlq", "list", "--json")).out)
    assert len(listed) == 1
    assert listed[0]["redriven_at"] is not None

    forced = await run("dlq", "redrive", str(seq), "--force")
    assert forced.code == 0, forced.err
    assert (await js.stream_info(stream)).state.messages == 2


async def test_redrive_operation_sends_work_execute_and_refuses_terminal_ones(
    js: JetStreamContext, topology: Topology, run: Holdline
) -> None:
    await _op(js, topology, "s1", "op1", *_unknown())
    stuck = await _letter(
        js, topology, Context.OPERATIONS, topology.operation_subject("s1", "op1"), b"[]"
    )
    done = await run("dlq", "redrive", str(stuck))
    assert done.code == 0, done.err
    work = await read_subject(
        js, topology.stream_name(Context.WORK), topology.work_subject("s1", "op1"), WORK
    )
    assert [type(i.envelope.event) for i in work.items] == [ExecuteOperation]
    assert work.items[0].envelope.operation_id == "op1"
    # Old events are never appended again.
    ops = await read_subject(
        js,
        topology.stream_name(Context.OPERATIONS),
        topology.operation_subject("s1", "op1"),
        OPERATIONS,
    )
    assert len(ops.items) == 4

    await _op(
        js, topology, "s1", "op2", OperationRejected(tool="t", reason="forbidden", detail="no")
    )
    final = await _letter(
        js, topology, Context.OPERATIONS, topology.operation_subject("s1", "op2"), b"[]"
    )
    refused = await run("dlq", "redrive", str(final))
    assert refused.code == 2
    assert "rejected" in refused.err

    event_letter = await _letter(
        js, topology, Context.BATCHES, topology.batch_event_subject("s1", "b1", "opened"), b"{}"
    )
    history = await run("dlq", "redrive", str(event_letter))
    assert history.code == 2
    assert "immutable history" in history.err
    missing = await run("dlq", "redrive", "999")
    assert missing.code == 2


async def test_resolve_unknown_records_who_and_why(
    js: JetStreamContext, topology: Topology, run: Holdline
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    await _op(js, topology, "s1", "op1", *_unknown())
    await _op(js, topology, "s1", "op2", *_unknown())

    done = await run(
        "resolve", "s1", "op1", "--as", "committed", "--by", "ana", "--why", "ledger shows it"
    )
    assert done.code == 0, done.err
    assert "resolved as committed by ana" in done.out
    events = (
        await read_subject(js, stream, topology.operation_subject("s1", "op1"), OPERATIONS)
    ).items
    last = events[-1].envelope
    assert last.event == OperationCommitted(
        result={"resolved_by": "ana", "reason": "ledger shows it"}, via="operator"
    )
    assert last.batch_id == "b1"

    failed = await run("resolve", "s1", "op2", "--as", "failed", "--by", "bo", "--why", "no trace")
    assert failed.code == 0, failed.err
    events = (
        await read_subject(js, stream, topology.operation_subject("s1", "op2"), OPERATIONS)
    ).items
    assert events[-1].envelope.event == OperationFailedFinal(
        reason="operator", detail="resolved by bo: no trace", via="operator"
    )

    again = await run("resolve", "s1", "op1", "--as", "failed", "--by", "ana", "--why", "oops")
    assert again.code == 2
    assert "is committed, not unknown" in again.err
    after = (
        await read_subject(js, stream, topology.operation_subject("s1", "op1"), OPERATIONS)
    ).items
    assert len(after) == len(_unknown()) + 1
    nothing = await run("resolve", "s1", "nope", "--as", "failed", "--by", "a", "--why", "b")
    assert nothing.code == 2
    assert "has no events" in nothing.err


async def test_rebuild_counts_projections_by_status(
    js: JetStreamContext, topology: Topology, run: Holdline
) -> None:
    await _op(js, topology, "s1", "op1", *_unknown())
    await _op(js, topology, "s1", "op2", *_unknown()[:1])
    await _op(js, topology, "s2", "op3", *_unknown()[:1])

    everything = await run("rebuild", "operations", "--json")
    assert everything.code == 0, everything.err
    summary = json.loads(everything.out)
    assert summary["by_status"] == {"admitted": 2, "unknown": 1}
    assert summary["events"] == 6
    assert summary["refused"] == 0

    one = await run("rebuild", "operations", "--session", "s2")
    assert one.code == 0, one.err
    assert "rebuilt operations for session s2: 1 from 1 events" in one.out
    assert "admitted: 1" in one.out

    for projection in ("batches", "deliveries", "sessions"):
        empty = await run("rebuild", projection, "--json")
        assert empty.code == 0, empty.err
        assert json.loads(empty.out)["total"] == 0
