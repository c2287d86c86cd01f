"""Flooding: an agent WebSocket sending 2,000 `signal` frames in a second appends at most its
rate limit's worth of events (the rest get `error` frames), and unauthenticated session
openings from one address are cut off with 429 once its bucket is dry."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
from nats.js.errors import NotFoundError
from websockets.asyncio.client import connect as ws_connect

from libs.bus import Context, Topology, connect
from libs.config import BusSettings
from libs.events import INTERACTION, SpeechStarted, SpeechStopped
from testkit.surface import SurfaceStack, open_chat

FRAMES = 2000
# The surface's default HOLDLINE_RATE_SESSION, and the stack's HOLDLINE_RATE_OPEN_ADDRESS
# (the default burst, refilled slowly so a slow run cannot refill it mid-test).
SESSION_BURST, SESSION_PER_S = 30, 5
ADDRESS_BURST = 60


async def speech_events(stack: SurfaceStack, session_id: str) -> int:
    """How many speech events the session's interaction subject holds, read raw."""
    topology = Topology(stack.prefix)
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="count")
    count = 0
    try:
        js = nc.jetstream()
        stream = topology.stream_name(Context.INTERACTION)
        info = await js.stream_info(stream)
        for seq in range(max(int(info.state.first_seq or 0), 1), int(info.state.last_seq) + 1):
            try:
                msg = await js.get_msg(stream, seq)
            except NotFoundError:
                continue
            if msg.subject != topology.session_subject(session_id):
                continue
            event = INTERACTION.decode(msg.data or b"").event
            count += isinstance(event, SpeechStarted | SpeechStopped)
    finally:
        await nc.close()
    return count


async def test_a_signal_flood_appends_at_most_the_rate_limits_worth(stack: SurfaceStack) -> None:
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        chat = await open_chat(client)
    url = f"ws://127.0.0.1:{stack.url.rsplit(':', 1)[1]}/v1/sessions/{chat.session_id}/agent"
    refused = 0
    async with ws_connect(f"{url}?token={chat.token}", max_queue=None) as ws:
        assert json.loads(await ws.recv())["type"] == "hello"
        started = time.monotonic()
        for i in range(FRAMES):
            # Alternating, so every frame would change the state (and append) if admitted.
            await ws.send(json.dumps({"type": "signal", "user_speaking": i % 2 == 0}))
        sent = time.monotonic() - started
        # Every refusal is answered; the answers stop once the frames are all read.
        while refused < FRAMES and time.monotonic() - started < 30:
            try:
                raw = await asyncio.wait_for(ws.recv(), timeout=2)
            except TimeoutError:
                break
            frame = json.loads(raw)
            if frame["type"] == "error":
                assert (frame["code"], frame["status"]) == ("rate_limited", 429), frame
                refused += 1
        elapsed = time.monotonic() - started - 2
    # A flood (2,000 frames in seconds), or the limit is not what the bounds below test.
    assert sent < 10, sent
    allowed = SESSION_BURST + SESSION_PER_S * elapsed + 2
    appended = await speech_events(stack, chat.session_id)
    assert appended <= allowed, (appended, elapsed)
    assert refused >= FRAMES - allowed, (refused, elapsed)


async def test_unauthenticated_openings_from_one_address_get_429(stack: SurfaceStack) -> None:
    # Through a proxy (a forwarding header): not a local caller, so no session opens without
    # a credential (401), and every attempt takes a token of the address's bucket.
    headers = {"X-Forwarded-For": "198.51.100.23"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        answers = [
            (await client.post("/v1/sessions", json={"user_id": "mallory"}, headers=headers))
            for _ in range(ADDRESS_BURST + 20)
        ]
    codes = [a.status_code for a in answers]
    assert set(codes) <= {401, 429}, codes
    limited = [a for a in answers if a.status_code == 429]
    assert len(limited) >= 15, codes
    assert limited[0].headers["content-type"].startswith("application/problem+json")
    assert int(limited[0].headers["Retry-After"]) >= 1
    assert limited[0].json()["scope"] == "address"
