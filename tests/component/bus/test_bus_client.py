"""The lean request and publish paths (libs/bus/client.py) against a real broker: the same
answers, messages and errors as nats-py's own, without the reply subscription's task or
nats-py's publish path."""

from __future__ import annotations

import asyncio
from unittest.mock import patch

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import BadHeaderError, BadSubjectError, NoRespondersError
from nats.js import JetStreamContext
from nats.js.errors import BadRequestError, KeyWrongLastSequenceError, NoStreamResponseError

from libs.bus.client import BusClient, BusJetStream
from libs.bus.topology import Context, Topology
from libs.config import BusSettings


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


async def test_messages_go_out_without_nats_py_s_publish_path_in_its_wire_format(
    nats_client: Client, bus_settings: BusSettings, topology: Topology
) -> None:
    subject = f"{topology.prefix}.wire"
    plain = await nats.connect(bus_settings.nats_url, name="plain")
    try:
        sub = await nats_client.subscribe(f"{subject}.>")
        await nats_client.flush()
        sent = nats_client.stats["out_msgs"]
        headers = {"X-Id": " 7 ", "X-Note": "line\r\nbreak", " ": "skipped"}
        with patch.object(Client, "_send_publish", side_effect=AssertionError("nats-py's path")):
            await nats_client.publish(f"{subject}.ours", b"one", headers=dict(headers))
            await nats_client.publish(f"{subject}.ours", b"two")
            await nats_client.publish(f"{subject}.ours", b"", reply=f"{subject}.back")
        await plain.publish(f"{subject}.theirs", b"one", headers=dict(headers))
        await plain.publish(f"{subject}.theirs", b"two")
        await plain.publish(f"{subject}.theirs", b"", reply=f"{subject}.back")
        await plain.flush()
        got = [await sub.next_msg(timeout=2) for _ in range(6)]
        assert nats_client.stats["out_msgs"] == sent + 3
        seen = [(m.subject.rsplit(".", 1)[1], m.data, m.headers, m.reply) for m in got]
        ours = [(d, h, r) for who, d, h, r in seen if who == "ours"]
        theirs = [(d, h, r) for who, d, h, r in seen if who == "theirs"]
        assert ours == theirs == [
            (b"one", {"X-Id": "7", "X-Note": "line  break"}, ""),
            (b"two", None, ""),
            (b"", None, f"{subject}.back"),
        ]
        # What nats-py refuses is refused the same way.
        for bad_subject, bad_headers, error in [
            ("has space", None, BadSubjectError),
            ("", None, BadSubjectError),
            (f"{subject}.x", {"bad name": "v"}, BadHeaderError),
        ]:
            for client in (nats_client, plain):
                with pytest.raises(error):
                    await client.publish(bad_subject, b"", headers=bad_headers)
    finally:
        await plain.close()


async def test_an_unanswered_request_times_out_as_nats_py_s_and_leaves_no_waiter(
    nats_client: Client, topology: Topology
) -> None:
    silent = await nats_client.subscribe(f"{topology.prefix}.silent")
    try:
        started = asyncio.get_running_loop().time()
        with pytest.raises(nats.errors.TimeoutError):
            await nats_client.request(f"{topology.prefix}.silent", b"ping", timeout=0.3)
        assert 0.25 <= asyncio.get_running_loop().time() - started < 2.0
        assert nats_client._resp_map == {}
        # The request did reach the broker (a responder saw it), unlike a refused one.
        assert (await silent.next_msg(timeout=2)).data == b"ping"
    finally:
        await silent.unsubscribe()
