"""Hypothesis against `WS /v1/telephony/twilio` on the real surface, beside a well-behaved call.

Every example is a fresh signed connection sending a drawn sequence of hostile frames. The
server either ignores them (counted and dropped) or closes with a stated code; it never
dies, the session it opened keeps its connected/disconnected events paired, and the
honest call on another connection is answered afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from services.interaction_surface.voice.twilio import twilio_signature
from testkit.hostile import JSON, SCALARS
from testkit.phone import AUTH_TOKEN, Phone, speech
from testkit.surface import Chat, SurfaceStack, eventually, open_chat
from testkit.voice import metric

REJECTED = "holdline_telephony_frames_rejected_total"
# Over the surface's 64 KiB per-frame limit.
HUGE = 96 * 1024

_events = st.sampled_from(["connected", "start", "media", "mark", "dtmf", "stop", "x", ""])


def _message(event: Any, **body: Any) -> str:
    return json.dumps({"event": event, "streamSid": "MZfuzz", **body})


_frames = st.one_of(
    st.text(max_size=40),
    st.binary(max_size=64),
    JSON.map(json.dumps),
    st.builds(_message, _events | SCALARS),
    st.builds(_message, st.just("media"), media=st.fixed_dictionaries(
        {"payload": st.text(max_size=30) | st.binary(max_size=161).map(
            lambda b: base64.b64encode(b).decode()) | SCALARS},
    ) | JSON),
    st.builds(_message, st.just("mark"), mark=st.fixed_dictionaries({"name": SCALARS}) | JSON),
    st.builds(_message, st.just("start"), start=JSON, sequenceNumber=SCALARS),
    st.builds(_message, st.just("dtmf"), dtmf=st.fixed_dictionaries({"digit": SCALARS})),
    st.just("x" * HUGE),
)


def _media(payload: Any, **extra: Any) -> str:
    return _message("media", media={"track": "inbound", "payload": payload, **extra})


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


# The named cases run on every run, before the drawn ones: (frames before, frames after)
# the proper `start`.
NAMED: list[tuple[list[str | bytes], list[str | bytes]]] = [
    ([_media(_b64(b"\xff" * 160)), _message("stop")], []),  # media and stop before start
    ([_message("mark", mark={"name": "nobody-sent-this"})], []),  # mark before start
    ([], [_message("start", start={"customParameters": {"user_id": "intruder"}})]),  # twice
    ([], [_message("mark", mark={"name": "never-sent"}), _message("mark", mark={"name": 7})]),
    ([], [_media("%%%not-base64%%%"), _media(_b64(b"\x7f")), _media(_b64(b"\x00" * 161))]),
    ([], [_media(_b64(b"\xff" * 160), chunk=[1], timestamp={"t": 1}), _message(12)]),
    ([], [_message("media", sequenceNumber=[], media="payload"), _message("holiday", x=1)]),
    ([], [b"\x00\x01binary", "{garbage", "[]", "null", '"media"']),
    ([], [_media(_b64(b"\xff" * (HUGE // 4 * 3)))]),  # real audio, but far too much of it
]


def _start(customs: dict[str, str]) -> str:
    return _message("start", start={"streamSid": "MZfuzz", "callSid": f"CA{uuid.uuid4().hex}",
                                    "customParameters": customs})


def named_examples(test: Any) -> Any:
    """Attach every NAMED case as an explicit example."""
    for before, after in reversed(NAMED):
        test = example(before=before, after=after)(test)
    return test


async def hostile_call(url: str, frames: list[str | bytes], customs: dict[str, str]) -> int | None:
    """Send the frames (a proper `start` somewhere among them); the close code, if closed."""
    signature = twilio_signature(AUTH_TOKEN, url, {})
    async with connect(url, additional_headers={"X-Twilio-Signature": signature},
                       max_size=None) as ws:
        try:
            for frame in frames:
                await ws.send(frame)
            await ws.send(_message("stop"))
            await asyncio.wait_for(ws.recv(), 5)
        except ConnectionClosed:
            pass
        except TimeoutError:
            return None
        return ws.close_code


async def paired(client: httpx.AsyncClient, session_id: str, token: str) -> bool:
    """Every connection the session saw is also recorded as gone (nothing half-written)."""
    response = await client.get(
        f"/v1/sessions/{session_id}/timeline", headers={"Authorization": f"Bearer {token}"}
    )
    kinds = [e["type"] for e in response.json()["events"]]
    return kinds.count("channel.connected") == kinds.count("channel.disconnected") >= 1


@pytest.mark.timeout(120)
async def test_hostile_stream_frames_never_crash_the_surface_or_other_calls(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    honest_chat = await open_chat(client)
    honest = Phone(stack.url, {"session_id": honest_chat.session_id, "token": honest_chat.token})
    await honest.dial()
    try:
        await attack_beside(stack, client, honest, honest_chat)
    finally:
        await honest.hang_up()


async def attack_beside(
    stack: SurfaceStack, client: httpx.AsyncClient, honest: Phone, honest_chat: Chat
) -> None:
    """The attack on other connections, then the honest call's turn."""
    target = await open_chat(client)
    customs = {"session_id": target.session_id, "token": target.token}
    url = stack.url.replace("http://", "ws://") + "/v1/telephony/twilio"
    closes: list[int | None] = []
    too_large_before = await metric(client, REJECTED, reason="frame_too_large")
    malformed_before = await metric(client, REJECTED, reason="malformed_json")

    @settings(max_examples=100, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(before=st.lists(_frames, max_size=4), after=st.lists(_frames, max_size=6))
    @named_examples
    def attack(before: list[str | bytes], after: list[str | bytes]) -> None:
        frames = [*before, _start(customs), *after]
        code = asyncio.run(hostile_call(url, frames, customs))
        closes.append(code)
        huge = any(len(f) >= HUGE for f in frames)
        # A normal end after `stop`, 4404 for a `start` that names no usable caller, 4403
        # for one that may not open a session (no call ticket), 1009 for a frame over the
        # limit; never an internal error (1011) nor a hang.
        allowed = {1000, 4403, 4404, 1009} if huge else {1000, 4403, 4404}
        assert code in allowed, (code, [f[:80] for f in frames])

    await asyncio.to_thread(attack)
    assert 1009 in closes
    # Every refusal is counted with its reason.
    too_large = await metric(client, REJECTED, reason="frame_too_large")
    assert too_large - too_large_before >= closes.count(1009)
    assert await metric(client, REJECTED, reason="malformed_json") > malformed_before
    assert (await client.get("/readyz")).status_code == 200
    await eventually(lambda: paired(client, target.session_id, target.token), timeout_s=20)
    # The honest call was connected all along: it is still heard, and answered in audio.
    await honest.talk(await speech("give me access to notion and gitlab"), realtime=False)

    async def replied() -> dict[str, Any] | None:
        events = await honest_chat.timeline()
        said = [e for e in events if e["type"] == "turn.received"]
        replies = [e for e in events if e["type"] == "turn.replied"]
        return replies[0] if said and replies else None

    reply = await eventually(replied, timeout_s=30)
    said = [e for e in await honest_chat.timeline() if e["type"] == "turn.received"]
    assert [(e["data"]["channel"], e["data"]["text"]) for e in said] == [
        ("voice", "give me access to notion and gitlab")
    ]
    await honest.wait_for(reply["response_id"], timeout_s=30)
