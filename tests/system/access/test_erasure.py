"""`DELETE /v1/sessions/{id}`: the session closes, its texts leave projections and streams,
the business it started still reaches its outcome exactly once, and then its events go too."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import httpx
import msgspec
from websockets.exceptions import ConnectionClosed

from libs.bus import Topology, connect
from libs.config import BusSettings
from libs.events import INTERACTION
from services.interaction_surface.core.view import SurfaceView
from testkit.surface import SurfaceStack, effects, eventually, fault, unique

from .stored import Stored, stored_messages
from .tenants import assert_problem, open_session, ws_status


async def test_erasure_closes_purges_texts_and_keeps_the_business_outcome(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_session(client, "acme")
    resource = unique("wiki")
    secret_word = f"pelican{uuid.uuid4().hex[:10]}"
    await fault(stack, match=resource, latency_ms=1500, times=1)
    await chat.say(f"my nickname is {secret_word}, nice to meet you")
    answer = await chat.say(f"give me access to {resource}")
    operation = answer["operations"][0]
    assert operation["status"] == "admitted"
    cursor = (await chat.snapshot())["cursor"]
    live = await chat.stream()

    erased = await client.delete(f"/v1/sessions/{chat.session_id}", headers=chat.auth)
    assert erased.status_code == 200, erased.text
    assert erased.json() == {
        "session_id": chat.session_id,
        "status": "erased",
        "pending_operations": [operation["operation_id"]],
    }

    # Gone for its own token too, on every route and on both surfaces.
    for base in (stack.url, stack.second_url):
        async with httpx.AsyncClient(base_url=base, timeout=20.0) as http:
            for method, path, body in (
                ("GET", "", None),
                ("GET", "/timeline", None),
                ("POST", "/turns", {"text": "are you there?"}),
                ("POST", "/activity", {"typing": True}),
                ("DELETE", "", None),
            ):
                answer_after = await http.request(
                    method, f"/v1/sessions/{chat.session_id}{path}", json=body, headers=chat.auth
                )
                assert_problem(answer_after, 404)
    assert await ws_status(chat.stream_url(after=cursor)) == 404
    # A stream already open is closed with the same answer, after at most a few frames.
    async def closed() -> int | None:
        with contextlib.suppress(ConnectionClosed):
            async for _ in live:
                pass
        return live.close_code

    assert await asyncio.wait_for(closed(), timeout=10) == 4404

    # The operation keeps its business outcome: committed once, one real effect.
    async def committed() -> bool:
        return await effects(stack, resource) == 1

    await eventually(committed, timeout_s=20)
    topology = Topology(stack.prefix)
    subject = topology.session_subject(chat.session_id)

    async def purged() -> list[Stored] | None:
        # Once its business settled, the session's operations, batches and deliveries are
        # purged too (core/erasure.py): only the marker is left of it.
        stored = await stored_messages(stack.nats_url, stack.prefix)
        mine = [m for m in stored if chat.session_id in m.subject]
        return stored if [m.subject for m in mine] == [subject] else None

    stored = await eventually(purged, timeout_s=30)
    assert await effects(stack, resource) == 1

    # The session's interaction subject keeps only the erasure marker: no text, no token hash.
    kept = [m for m in stored if m.subject == subject]
    assert len(kept) == 1
    marker = INTERACTION.decode(kept[0].data)
    assert msgspec.to_builtins(marker.event) == {"type": "session.closed", "reason": "erased"}
    # A view rebuilt from the streams (as a restarted surface builds it) agrees: no session,
    # no event of it at all, and it starts although the streams' last messages are purged.
    rebuilt = SurfaceView()
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="rebuild")
    try:
        await rebuilt.follow(nc.jetstream(), topology)
        await asyncio.wait_for(rebuilt.caught_up.wait(), 15)
        assert rebuilt.session(chat.session_id) is None
        found = rebuilt.log(chat.session_id)
        assert found is not None
        assert found.erased
        assert not found.entries
        assert rebuilt.session_operations(chat.session_id) == []
    finally:
        await rebuilt.close()
        await nc.close()
    # The user's words are nowhere in the broker any more.
    assert not [m for m in stored if secret_word.encode() in m.data]
    assert not [m for m in stored if b"nice to meet you" in m.data]
