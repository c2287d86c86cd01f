"""Erasure leaves none of a session's words on the broker: after `DELETE /v1/sessions/{id}`
a raw scan of every stream and every KV bucket of the deployment finds no canary text of
the session, and services restarted over the purged streams still start and serve."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from nats.js import JetStreamContext
from nats.js.api import StreamInfo
from nats.js.errors import NotFoundError

from libs.bus import DEAD_LETTER_DECODER, Context, Topology, connect
from libs.config import BusSettings
from testkit.hostile import healthy
from testkit.surface import SurfaceStack, eventually, open_chat


@pytest.fixture
async def js(stack: SurfaceStack) -> AsyncIterator[JetStreamContext]:
    """A client on the stack's broker, reading raw messages."""
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="scan")
    yield nc.jetstream()
    await nc.close()


async def deployment_streams(js: JetStreamContext, prefix: str) -> list[StreamInfo]:
    """Every stream of the deployment: its event streams and its KV buckets' streams. The
    broker lists streams a page (256) at a time, and the run's shared broker holds every
    test's streams, so the list is read page by page (one page would miss some, depending on
    where this prefix sorts)."""
    ours = (f"{prefix.upper()}_", f"KV_{prefix}_")
    found: list[StreamInfo] = []
    offset = 0
    for _page in range(1000):
        page = await js.streams_info(offset=offset)
        if not page:
            break
        offset += len(page)
        found += [i for i in page if (i.config.name or "").startswith(ours)]
    return found


async def last_sequences(js: JetStreamContext, prefix: str) -> dict[str, int]:
    """Every stream's last sequence: what was stored before the canary existed."""
    return {
        info.config.name or "": int(info.state.last_seq or 0)
        for info in await deployment_streams(js, prefix)
    }


async def found_in(
    js: JetStreamContext, prefix: str, canary: bytes, since: dict[str, int]
) -> list[str]:
    """Where the canary is stored: `stream:subject` of every message holding it, over every
    stream of the deployment (its event streams and the KV buckets' streams). Messages
    stored before the test (`since`) cannot hold a canary made in it, and the package's
    stack holds thousands of them from the other hostile tests: they are not read again."""
    hits: list[str] = []
    for info in await deployment_streams(js, prefix):
        name = info.config.name or ""
        first, last = int(info.state.first_seq or 0), int(info.state.last_seq or 0)
        for seq in range(max(first, since.get(name, 0) + 1, 1), last + 1):
            try:
                msg = await js.get_msg(name, seq)
            except NotFoundError:
                continue
            data = msg.data or b""
            if name.endswith("_DLQ"):
                # A dead letter carries the poison's bytes base64-encoded: read them too.
                data += DEAD_LETTER_DECODER.decode(data).payload
            if canary in data or canary in (msg.subject or "").encode():
                hits.append(f"{name}:{msg.subject}")
    return hits


@pytest.mark.timeout(180)
async def test_erasure_leaves_no_words_of_the_session_on_the_broker(
    stack: SurfaceStack, js: JetStreamContext
) -> None:
    canary = f"zebra-canary-{uuid.uuid4().hex[:10]}"
    since = await last_sequences(js, stack.prefix)
    topology = Topology(stack.prefix)
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        chat = await open_chat(client)
        # Free text in turns, a tool call from a turn, and one through the Agent API with
        # free-text arguments and user text (its answer is stored in the turns bucket).
        await chat.say(f"my nickname is {canary}-nick, nice to meet you")
        answer = await chat.say(f"give me access to {canary}")
        assert [op["tool"] for op in answer["operations"]] == ["provision_access"]
        tool_calls = {
            "calls": [{
                "tool_call_id": f"call-{canary}",
                "name": "provision_access",
                "arguments": {"accesses": [f"{canary}-tool"]},
            }],
            "user_text": f"please give me {canary}-tool",
        }
        url = f"/v1/sessions/{chat.session_id}/tool-calls"
        called = await client.post(url, headers=chat.auth, json=tool_calls)
        assert called.status_code == 200, called.text
        # The repeat is answered from the stored answer (it waits while that is pending), so
        # the answer and its words are in the turns bucket from here on.
        repeated = await client.post(url, headers=chat.auth, json=tool_calls)
        assert repeated.status_code == 200, repeated.text
        assert repeated.json()["results"] == called.json()["results"]
        assert f"{canary}-tool" in repeated.json()["results"][0]["output"]
        # A poison message of the session, dead-lettered with its bytes.
        poison = topology.operation_event_subject(chat.session_id, "op1", "admitted")
        await js.publish(poison, b"\x00{" + canary.encode())

        async def settled() -> bool:
            ops = (await chat.snapshot())["operations"]
            return len(ops) == 2 and all(op["status"] == "committed" for op in ops)

        await eventually(settled, timeout_s=30)
        dlq = f"{topology.prefix}.dlq.operations.{chat.session_id}"

        async def everywhere() -> list[str] | None:
            hits = await found_in(js, stack.prefix, canary.encode(), since)
            streams = {h.split(":")[0] for h in hits}
            wanted = {
                topology.stream_name(c)
                for c in (Context.INTERACTION, Context.OPERATIONS, Context.BATCHES,
                          Context.DELIVERIES, Context.DLQ)
            } | {f"KV_{topology.bucket('turns')}"}
            missing[:] = sorted(wanted - streams) + ([] if any(dlq in h for h in hits) else [dlq])
            return hits if not missing else None

        # The canary is where a session's words go before the erasure (the scan can fail).
        # Bounded generously: on a loaded 2-core run the dead letter and the closing lag.
        missing: list[str] = []
        try:
            await eventually(everywhere, timeout_s=45)
        except AssertionError:
            surface = stack.procs["interaction_surface"].tail(60)
            raise AssertionError(
                f"the canary never reached {missing}; the surface's log ends:\n{surface}"
            ) from None

        erased = await client.delete(f"/v1/sessions/{chat.session_id}", headers=chat.auth)
        assert erased.status_code == 200, erased.text
        assert erased.json()["pending_operations"] == []

        async def gone() -> bool:
            return not await found_in(js, stack.prefix, canary.encode(), since)

        await eventually(gone, timeout_s=20, every_s=0.5)

    # Services rebuilding their projections from the purged streams still start and serve.
    for name in ("interaction_surface", "delivery_policy"):
        proc = stack.procs[name]
        proc.kill9()
        await asyncio.to_thread(proc.start)
    await healthy(stack)
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        again = await client.get(f"/v1/sessions/{chat.session_id}", headers=chat.auth)
        assert again.status_code == 404
        other = await open_chat(client)
        assert (await other.say("hello there"))["reply"]
    assert not await found_in(js, stack.prefix, canary.encode(), since)
