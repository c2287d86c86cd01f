"""Poison on the running services' streams: dead-lettered by every consumer, others unaffected.

tests/component/bus/test_bus.py proves the mechanism on one consumer; here every durable
consumer of the real surface, policy, coordinator and worker meets malformed bytes, an
event of another stream and one of another schema version on its own stream.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import msgspec
import pytest
from nats.js import JetStreamContext

from libs.bus import DEAD_LETTER_DECODER, Context, DeadLetter, Topology, connect
from libs.bus.memory import subject_matches
from libs.config import BusSettings
from libs.events import INTERACTION, OPERATIONS, OperationCommitted, SessionOpened
from testkit.events import envelope
from testkit.hostile import STREAMS, completes_a_tool_call, healthy, valid
from testkit.surface import SurfaceStack, eventually, open_chat

SUBJECTS: dict[Context, tuple[Callable[[Topology, str], str], ...]] = {
    Context.INTERACTION: (lambda t, s: t.session_subject(s),),
    # Kinds that, together, every durable of the stream asks for (each filters by kind):
    # the worker and the policy take admissions, the coordinator commits.
    Context.OPERATIONS: (
        lambda t, s: t.operation_event_subject(s, "op1", "admitted"),
        lambda t, s: t.operation_event_subject(s, "op1", "committed"),
    ),
    Context.BATCHES: (lambda t, s: t.batch_event_subject(s, "b1", "opened"),),
    # The policy takes readiness, the surface's executor decisions.
    Context.DELIVERIES: (
        lambda t, s: t.delivery_event_subject(s, "d1", "ready"),
        lambda t, s: t.delivery_event_subject(s, "d1", "decided"),
    ),
    Context.WORK: (lambda t, s: t.work_subject(s, "op1"),),
}
# The control stream has no durable consumer (only the surface's live view reads it).


def payloads(context: Context) -> dict[str, bytes]:
    """One payload per refusal reason, for a stream."""
    codec, _union, event = STREAMS[context]
    # A well-formed event of another stream.
    stranger = (
        OPERATIONS.encode(envelope(OperationCommitted(result={})))
        if context is not Context.OPERATIONS
        else INTERACTION.encode(
            envelope(SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h"))
        )
    )
    old = valid(codec, event)
    old["schema_version"] = 2
    return {
        "malformed": b"\x00{not json",
        "unknown_type": stranger,
        "wrong_version": msgspec.json.encode(old),
    }


@pytest.fixture
async def js(stack: SurfaceStack) -> AsyncIterator[JetStreamContext]:
    """A client on the stack's broker."""
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="poison")
    yield nc.jetstream()
    await nc.close()


async def letters(js: JetStreamContext, topology: Topology) -> list[DeadLetter]:
    """Everything in the dead-letter stream."""
    stream = topology.stream_name(Context.DLQ)
    last = (await js.stream_info(stream)).state.last_seq
    found = []
    for seq in range(1, last + 1):
        raw = await js.get_msg(stream, seq)
        found.append(DEAD_LETTER_DECODER.decode(raw.data or b""))
    return found


@pytest.mark.timeout(90)
async def test_poison_on_every_stream_is_dead_lettered_by_every_consumer_with_its_reason(
    stack: SurfaceStack, client: httpx.AsyncClient, js: JetStreamContext
) -> None:
    topology = Topology(stack.prefix)
    bystander = await open_chat(client)
    expected: dict[str, tuple[str, set[str]]] = {}
    for context, subjects_of in SUBJECTS.items():
        stream = topology.stream_name(context)
        filters = {
            str(c.config.durable_name): c.config.filter_subjects or [c.config.filter_subject or ""]
            for c in await js.consumers_info(stream)
            if c.config.durable_name
        }
        assert filters, stream
        reached: set[str] = set()
        for subject_of in subjects_of:
            for reason, payload in payloads(context).items():
                subject = subject_of(topology, f"poison-{uuid.uuid4().hex[:12]}")
                takers = {
                    d for d, fs in filters.items()
                    if any(f and subject_matches(f, subject) for f in fs)
                }
                assert takers, subject
                reached |= takers
                await js.publish(subject, payload)
                expected[subject] = (reason, takers)
        # Every durable of the stream meets poison.
        assert reached == set(filters), (stream, reached)

    async def all_dead_lettered() -> dict[str, list[DeadLetter]] | None:
        by_subject: dict[str, list[DeadLetter]] = {}
        for letter in await letters(js, topology):
            by_subject.setdefault(letter.source_subject, []).append(letter)
        done = all(
            {lt.consumer for lt in by_subject.get(subject, [])} >= consumers
            for subject, (_reason, consumers) in expected.items()
        )
        return by_subject if done else None

    by_subject = await eventually(all_dead_lettered, timeout_s=30)
    for subject, (reason, consumers) in expected.items():
        got = by_subject[subject]
        # Once per consumer, first delivery, with the codec's reason and the payload kept.
        assert sorted(lt.consumer for lt in got) == sorted(consumers), (subject, got)
        assert {lt.reason for lt in got} == {reason}, (subject, got)
        assert all(lt.num_delivered == 1 and lt.error for lt in got), got
    # No consumer is left holding a poisoned message.
    for context in SUBJECTS:
        stream = topology.stream_name(context)
        for info in await js.consumers_info(stream):
            if info.config.durable_name:
                assert info.num_ack_pending == 0, info
    await healthy(stack)
    await completes_a_tool_call(stack, bystander)
