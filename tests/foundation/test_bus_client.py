"""The lean request path (libs/bus/client.py) against a real broker: the same answers and
errors as nats-py's own, without the reply subscription's task."""

from __future__ import annotations

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, KeyWrongLastSequenceError, NoStreamResponseError

from libs.bus.client import BusClient, BusJetStream
from libs.bus.topology import Context, Topology


async def test_acknowledgements_match_nats_py_s_and_skip_the_reply_task(
    nats_client: Client, js: JetStreamContext, topology: Topology
) -> None:
    assert isinstance(nats_client, BusClient)
    assert isinstance(js, BusJetStream)
    plain = JetStreamContext(nats_client)
    subject = f"{topology.prefix}.operations.s1.op1.admitted"
    ours = [await js.publish(subject, b"a", headers={"Nats-Msg-Id": f"m{i % 2}"}) for i in range(3)]
    theirs = [
        await plain.publish(subject, b"b", headers={"Nats-Msg-Id": f"n{i % 2}"}) for i in range(3)
    ]
    first = ours[0].seq
    assert [(a.stream, a.seq, bool(a.duplicate)) for a in ours + theirs] == [
        (topology.stream_name(Context.OPERATIONS), seq, dup)
        for seq, dup in [
            (first, False), (first + 1, False), (first, True),
            (first + 2, False), (first + 3, False), (first + 2, True),
        ]
    ]
    # Six requests answered; none went through the reply subscription's queue and task.
    reply_sub = nats_client._subs[nats_client._reply_sid]
    assert reply_sub.subject.endswith(".*")
    assert reply_sub._received == 0


async def test_a_refusal_raises_what_nats_py_raises(
    nats_client: Client, js: JetStreamContext, topology: Topology
) -> None:
    plain = JetStreamContext(nats_client)
    subject = f"{topology.prefix}.operations.s1.op2.admitted"
    await js.publish(subject, b"a")
    stale = {"Nats-Expected-Last-Subject-Sequence": "0"}
    caught = []
    for ctx in (js, plain):
        with pytest.raises(BadRequestError) as refused:
            await ctx.publish(subject, b"b", headers=stale)
        caught.append((refused.value.code, refused.value.err_code))
        with pytest.raises(NoStreamResponseError):
            await ctx.publish(f"{topology.prefix}-nowhere.x", b"c")
    assert caught[0] == caught[1] == (400, 10071)


async def test_key_value_writes_go_through_the_lean_publish(
    nats_client: Client, js: JetStreamContext, topology: Topology
) -> None:
    kv = await js.key_value(topology.bucket("leases"))
    first = await kv.create("op-1", b"w1")
    with pytest.raises(KeyWrongLastSequenceError):
        await kv.create("op-1", b"w2")
    assert await kv.update("op-1", b"w3", last=first) == first + 1
    assert (await kv.get("op-1")).value == b"w3"
    assert nats_client._subs[nats_client._reply_sid]._received == 0


async def test_a_reply_with_headers_and_a_status_keep_nats_py_s_path(
    nats_client: Client, topology: Topology
) -> None:
    async def answer(msg: Msg) -> None:
        await msg.respond(b"pong")

    async def answer_with_headers(msg: Msg) -> None:
        await nats_client.publish(msg.reply, b"pong", headers={"X-Which": "headers"})

    plain = await nats_client.subscribe(f"{topology.prefix}.plain", cb=answer)
    headed = await nats_client.subscribe(f"{topology.prefix}.headed", cb=answer_with_headers)
    try:
        reply = await nats_client.request(f"{topology.prefix}.plain", b"ping", timeout=2)
        assert (reply.data, reply.headers) == (b"pong", None)
        reply = await nats_client.request(f"{topology.prefix}.headed", b"ping", timeout=2)
        assert (reply.data, reply.headers) == (b"pong", {"X-Which": "headers"})
        # "No responders" is a status in the headers: raised, as nats-py raises it.
        with pytest.raises(NoRespondersError):
            await nats_client.request(f"{topology.prefix}.nobody", b"ping", timeout=2)
    finally:
        await plain.unsubscribe()
        await headed.unsubscribe()
    # Only the reply with headers was queued for the reply subscription's task.
    assert nats_client._subs[nats_client._reply_sid]._received == 2
