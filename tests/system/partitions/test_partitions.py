"""Partitioned stateful services (DESIGN §8): two coordinators and two policies, one per partition.

Every service runs as a process on the shared broker. Partition 0 of the batch-coordinator and
the delivery-policy comes from the stack; partition 1 of each is started next to it. Sessions
are many, so both partitions own some. With both partitions up every batch closes with exactly
one `delivery.ready` and one delivered closing. With partition 1 killed (-9), partition 0 keeps
closing its own sessions and leaves partition 1's alone (their operations commit, yet no batch
step and no delivery appears); once partition 1 restarts it rebuilds its sessions from the
streams and closes each of them exactly once.
"""

from __future__ import annotations

import asyncio
import functools
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from nats.aio.msg import Msg

from libs.bus import Context, Topology, connect
from libs.bus.topology import partition_of
from libs.config import BusSettings
from testkit.drained import settled
from testkit.processes import (
    Broker,
    ServiceProcess,
    free_port,
    nats_server_binary,
    wait_port,
)
from testkit.surface import Chat, SurfaceStack, closings, eventually, open_chat, unique

PARTITIONED = ("batch_coordinator", "delivery_policy")
# Enough sessions that each partition owns several of them.
PER_PARTITION = 3


async def test_the_hash_is_the_brokers_partition_function(tmp_path: Path) -> None:
    # A broker of its own with a `partition(N, 1)` mapping: it must place every session where
    # partition_of does, so the filter can move from the consumers to the broker unchanged.
    port = free_port()
    config = tmp_path / "mapping.conf"
    mapping = '"pt.*": "pt.{{wildcard(1)}}.{{partition(7,1)}}"'
    config.write_text(f"port: {port}\nmappings: {{ {mapping} }}\n")
    with (tmp_path / "nats.log").open("wb") as log:
        server = subprocess.Popen(
            [nats_server_binary(), "-c", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_port(port)
        nc = await nats.connect(f"nats://127.0.0.1:{port}")
        placed: dict[str, int] = {}

        async def record(msg: Msg) -> None:
            _, session, part = msg.subject.split(".")
            placed[session] = int(part)

        await nc.subscribe("pt.>", cb=record)
        sessions = [f"s_{uuid.uuid4().hex[:16]}" for _ in range(60)]
        for session in sessions:
            await nc.publish(f"pt.{session}", b"")
        await nc.flush()
        for _ in range(100):
            if len(placed) == len(sessions):
                break
            await asyncio.sleep(0.02)
        await nc.close()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert placed == {s: partition_of(s, 7) for s in sessions}


@pytest.fixture
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """The whole system with the stateful services as partition 0 of 2, plus partition 1."""
    logs = tmp_path_factory.mktemp("partitions")
    running = SurfaceStack(
        nats_url=broker.url,
        prefix=f"p{uuid.uuid4().hex[:10]}",
        logs=logs,
        env={"HOLDLINE_PARTITIONS": "2", "HOLDLINE_PARTITION": "0"},
    )
    try:
        running.start()
        for name in PARTITIONED:
            port = free_port()
            env = {
                **running.procs[name].env,
                "HOLDLINE_PARTITION": "1",
                f"{name.upper()}_PORT": str(port),
            }
            second = ServiceProcess(name, env, port, logs / f"{name}-p1.log")
            running.procs[f"{name}_p1"] = second
            second.start(wait_ready=False)
        for name in PARTITIONED:
            running.procs[f"{name}_p1"].wait_ready(60)
        yield running
    finally:
        running.stop()


async def _chats_per_partition(client: httpx.AsyncClient) -> dict[int, list[Chat]]:
    """Open sessions until each partition owns PER_PARTITION of them."""
    owned: dict[int, list[Chat]] = {0: [], 1: []}
    for _ in range(40 * PER_PARTITION):
        if min(len(c) for c in owned.values()) >= PER_PARTITION:
            break
        chat = await open_chat(client)
        mine = owned[partition_of(chat.session_id, 2)]
        if len(mine) < PER_PARTITION:
            mine.append(chat)
    assert min(len(c) for c in owned.values()) == PER_PARTITION
    return owned


async def _ask(chat: Chat) -> str:
    """One turn that admits one operation; returns its batch id."""
    answer = await chat.say(f"give me access to {unique('repo')}")
    [operation] = answer["operations"]
    return str(operation["batch_id"])


async def _closed_once(chat: Chat, batch: str) -> dict[str, Any] | None:
    """The snapshot once the batch's single closing was delivered."""
    snap = await chat.snapshot()
    finals = [d for d in snap["deliveries"] if d["batch_id"] == batch and d["kind"] == "final"]
    if not finals or finals[0]["status"] != "delivered":
        return None
    return snap


async def _assert_closed_exactly_once(chat: Chat, batch: str) -> None:
    snap = await eventually(lambda: _closed_once(chat, batch), timeout_s=40)
    finals = [d for d in snap["deliveries"] if d["batch_id"] == batch and d["kind"] == "final"]
    assert len(finals) == 1
    assert len(closings(snap, batch)) == 1
    assert {o["status"] for o in snap["operations"]} == {"committed"}
    timeline = await chat.timeline()
    ready = [
        e for e in timeline
        if e["type"] == "delivery.ready" and e["delivery_id"] == finals[0]["delivery_id"]
    ]
    assert len(ready) == 1
    assert [e["type"] for e in timeline].count("batch.drained") == 1


async def _all_closed_exactly_once(chats: list[Chat], batches: list[str]) -> None:
    await asyncio.gather(
        *(_assert_closed_exactly_once(c, b) for c, b in zip(chats, batches, strict=True))
    )


async def _committed_but_untouched(chat: Chat, batch: str) -> bool:
    """The operation committed, and no coordinator step nor delivery exists for the batch."""
    snap = await chat.snapshot()
    if {o["status"] for o in snap["operations"]} != {"committed"}:
        return False
    kinds = [e["type"] for e in await chat.timeline()]
    assert "batch.member_settled" not in kinds, kinds
    assert not [d for d in snap["deliveries"] if d["batch_id"] == batch]
    return True


async def _consumer_names(stack: SurfaceStack) -> set[str]:
    settings = BusSettings(nats_url=stack.nats_url, prefix=stack.prefix)
    topo = Topology(stack.prefix)
    nc = await connect(settings, name="partitions-test")
    try:
        js = nc.jetstream()
        names: set[str] = set()
        for context in (Context.OPERATIONS, Context.BATCHES, Context.DELIVERIES):
            for info in await js.consumers_info(topo.stream_name(context)):
                names.add(info.name)
        return names
    finally:
        await nc.close()


@pytest.mark.timeout(150)
async def test_each_partition_closes_only_its_sessions_and_recovers_after_kill(
    stack: SurfaceStack,
) -> None:
    # Two processes per service, one durable consumer per partition.
    names = await _consumer_names(stack)
    for role in ("operations", "batches"):
        assert {f"batch-coordinator-{role}-p0", f"batch-coordinator-{role}-p1"} <= names
    assert {"delivery-policy-deliveries-p0", "delivery-policy-deliveries-p1"} <= names
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        # Both partitions up: every session's batch closes exactly once.
        owned = await _chats_per_partition(client)
        chats = owned[0] + owned[1]
        batches = list(await asyncio.gather(*(_ask(c) for c in chats)))
        await _all_closed_exactly_once(chats, batches)

        # Partition 1 dies mid-conversation.
        for name in PARTITIONED:
            stack.procs[f"{name}_p1"].kill9()
        owned = await _chats_per_partition(client)
        survivors = list(await asyncio.gather(*(_ask(c) for c in owned[0])))
        orphans = list(await asyncio.gather(*(_ask(c) for c in owned[1])))
        await _all_closed_exactly_once(owned[0], survivors)
        # Partition 0 never steps in for partition 1's sessions: not when they commit, nor
        # once every running consumer (all but partition 1's) has handled the commits.
        for chat, batch in zip(owned[1], orphans, strict=True):
            await eventually(functools.partial(_committed_but_untouched, chat, batch), timeout_s=30)
        await settled(stack, only=lambda durable: not durable.endswith("-p1"))
        for chat, batch in zip(owned[1], orphans, strict=True):
            assert await _committed_but_untouched(chat, batch)

        # Partition 1 comes back: rebuilt from the streams, it closes each batch once.
        for name in PARTITIONED:
            stack.procs[f"{name}_p1"].start(wait_ready=False)
        for name in PARTITIONED:
            stack.procs[f"{name}_p1"].wait_ready(60)
        await _all_closed_exactly_once(owned[1], orphans)
        # And no session was closed a second time meanwhile, once all of it was handled.
        await settled(stack)
        await _all_closed_exactly_once(owned[0] + owned[1], survivors + orphans)
