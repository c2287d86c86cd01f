"""Browser voice over WebRTC against the running system: an `aiortc` peer (real ICE, DTLS and
SRTP on this host) speaking espeak-ng audio, playing the agent's audio and returning marks."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import struct
import sys
from typing import Any

import httpx
from aiortc import RTCConfiguration, RTCPeerConnection
from aiortc.rtcrtpsender import RTCRtpSender

from services.interaction_surface.voice.codec import pcm16_to_ulaw, silence_ulaw
from testkit.phone import speech
from testkit.surface import Chat, SurfaceStack, eventually, fault, open_chat
from testkit.voice import (
    SPOKEN_REQUEST,
    SPOKEN_RESOURCES,
    carriers,
    delivery_with,
    events_of,
    ledger,
    metric,
    unique,
)
from testkit.webrtc_peer import WebRtcPeer

REJECTED = "holdline_telephony_frames_rejected_total"


async def _dial(stack: SurfaceStack, chat: Chat, **options: Any) -> WebRtcPeer:
    peer = WebRtcPeer(stack.url, {"session_id": chat.session_id, "token": chat.token}, **options)
    await peer.connect()
    return peer


async def _disconnected(chat: Chat) -> dict[str, Any] | None:
    found = await events_of(chat, "channel.disconnected")
    return found[0] if found else None


async def _heard(peer: WebRtcPeer, chat: Chat, delivery_id: str) -> str | None:
    """The mark that carried the delivery, once the page returned it after playing it."""
    for name in await carriers(chat, delivery_id):
        mark = peer.mark(name)
        if mark is not None and mark.returned_at is not None and not mark.flushed:
            return name
    return None


async def test_a_spoken_request_is_accepted_run_and_its_closing_heard_once(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    # The provider answers late, so the closing comes well after the acceptance.
    for name in SPOKEN_RESOURCES:
        await fault(stack, match=name, latency_ms=700, times=1)
    peer = await _dial(stack, chat)
    try:
        await peer.talk(await speech(SPOKEN_REQUEST))

        async def replied() -> list[dict[str, Any]]:
            return await events_of(chat, "turn.replied")

        first = (await eventually(replied, timeout_s=20))[0]
        # The reply was spoken on the call: its audio came and the page played its mark.
        await eventually(lambda: _returned(peer, first["response_id"]), timeout_s=20)
        if await events_of(chat, "hearing.asked"):
            # The recognizer doubted a name and asked; the caller confirms, as a person would.
            await peer.talk(await speech("yes"))

        async def operations() -> list[dict[str, Any]] | None:
            ops: list[dict[str, Any]] = (await chat.snapshot())["operations"]
            return ops if len(ops) == 2 else None

        try:
            ops = await eventually(operations, timeout_s=20)
        except AssertionError:
            heard = [(e["type"], e["data"].get("text")) for e in await chat.timeline()]
            raise AssertionError(f"no operations; the timeline: {heard}") from None
        # The acceptance (the reply of the turn that admitted them) was heard too.
        acceptance = (await replied())[-1]
        await eventually(lambda: _returned(peer, acceptance["response_id"]), timeout_s=20)
        spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
        assert spoken["batch_id"] == ops[0]["batch_id"]
        assert await eventually(lambda: _heard(peer, chat, spoken["delivery_id"]))
        assert peer.voiced_frames > 50
        snapshot = await chat.snapshot()
        assert [o["status"] for o in snapshot["operations"]] == ["committed", "committed"]
        closing = [m for m in snapshot["messages"] if m["delivery_id"]]
        assert len(closing) == 1
        for name in SPOKEN_RESOURCES:
            assert await ledger(stack, name) == 1
        connected = await events_of(chat, "channel.connected")
        assert connected[0]["data"] == {
            "channel": "voice", "connection_id": f"call_{peer.call_id}"
        }
        # The page's live transcript: what was heard, and what the agent said.
        roles = {t["role"] for t in peer.transcripts}
        assert roles == {"user", "assistant"}
    finally:
        await peer.close()
    gone = await eventually(lambda: _disconnected(chat), timeout_s=15)
    assert gone["data"]["reason"] in ("peer_closed", "peer_vanished")


async def _returned(peer: WebRtcPeer, name: str) -> bool:
    mark = peer.mark(name)
    return mark is not None and mark.returned_at is not None


async def test_barge_in_during_the_closing_clears_it_and_it_comes_back_shorter(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    peer = await _dial(stack, chat)
    try:
        name = unique("rtcslack")
        await chat.say(f"give me access to {name}")
        first = await eventually(lambda: delivery_with(chat, "sent"), timeout_s=20)
        # 0.6 s into the closing, the caller talks over it.
        await peer.wait_voiced(30)
        await peer.talk(await speech("wait, one moment please"))
        assert peer.clears, "no clear came on the data channel"

        async def barge() -> list[dict[str, Any]]:
            return await events_of(chat, "control.barge_in")

        event = (await eventually(barge))[0]
        assert event["delivery_id"] == first["delivery_id"]
        assert event["data"]["unheard_ms"] > 0

        async def unheard() -> list[dict[str, Any]]:
            return await events_of(chat, "delivery.unheard", delivery_id=first["delivery_id"])

        await eventually(unheard)
        # After the quiet window it comes back, shorter, and is heard this time.
        spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
        assert spoken["delivery_id"] == first["delivery_id"]
        assert await eventually(lambda: _heard(peer, chat, first["delivery_id"]), timeout_s=20)
        messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
        assert len(messages) == 1
        assert await ledger(stack, name) == 1
    finally:
        await peer.close()


async def _offer_of(pc: RTCPeerConnection) -> str:
    await pc.setLocalDescription(await pc.createOffer())
    sdp = str(pc.localDescription.sdp)
    await pc.close()
    return sdp


async def test_bad_offers_are_refused_with_problem_details(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    ours = {"session_id": chat.session_id, "token": chat.token}
    no_audio = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    no_audio.createDataChannel("holdline")
    pcma = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    transceiver = pcma.addTransceiver("audio", direction="sendrecv")
    transceiver.setCodecPreferences(
        [c for c in RTCRtpSender.getCapabilities("audio").codecs if c.mimeType == "audio/PCMA"]
    )
    good = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    good.addTransceiver("audio", direction="sendrecv")
    good_sdp = await _offer_of(good)
    cases = [
        ({"sdp": "not a session description", "type": "offer", **ours}, 400),
        ({"sdp": await _offer_of(no_audio), "type": "offer", **ours}, 422),
        ({"sdp": await _offer_of(pcma), "type": "offer", **ours}, 422),
        ({"sdp": good_sdp, "type": "answer", **ours}, 422),
        ({"sdp": good_sdp, "type": "offer"}, 422),
        ({"sdp": good_sdp, "type": "offer", "session_id": chat.session_id, "token": "wrong"},
         404),
        ({"sdp": good_sdp, "type": "offer", "session_id": "s_nope", "token": chat.token}, 404),
    ]
    for body, status in cases:
        answer = await client.post("/v1/webrtc/offer", json=body)
        assert answer.status_code == status, (body, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
    garbage = await client.post(
        "/v1/webrtc/offer", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert garbage.status_code == 400
    assert not await events_of(chat, "channel.connected")


async def test_bad_data_channel_frames_are_dropped_and_counted_and_the_call_goes_on(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    before = {
        reason: await metric(client, REJECTED, reason=reason)
        for reason in ("malformed_json", "unknown_mark", "unknown_frame")
    }
    peer = await _dial(stack, chat, play_delay_s=0.05)
    try:
        peer.send("{garbage")
        peer.send({"type": "mark", "name": "never-sent"})
        peer.send({"type": "hello"})

        async def counted() -> bool:
            for reason, count in before.items():
                if await metric(client, REJECTED, reason=reason) != count + 1:
                    return False
            return True

        await eventually(counted)
        # The call still carries the conversation: a closing is spoken on it and heard.
        await chat.say(f"give me access to {unique('rtcbad')}")
        spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
        assert await eventually(lambda: _heard(peer, chat, spoken["delivery_id"]))
        assert not await events_of(chat, "channel.disconnected")
    finally:
        await peer.close()


async def test_an_offer_for_a_caller_opens_a_session(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    before = await metric(client, "holdline_telephony_calls_total", outcome="started")
    peer = WebRtcPeer(stack.url, {"user_id": unique("browser-"), "tenant_id": "acme"})
    await peer.connect()
    try:
        assert peer.call_id
        after = await metric(client, "holdline_telephony_calls_total", outcome="started")
        assert after == before + 1
    finally:
        await peer.close()


async def test_a_peer_that_vanishes_ends_its_call_and_others_go_on(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    other = await open_chat(client)
    staying = await _dial(stack, other)
    gone = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "testkit.webrtc_peer", stack.url, chat.session_id, chat.token,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert gone.stdout is not None
        line = await asyncio.wait_for(gone.stdout.readline(), 20)
        assert line.startswith(b"connected"), line
        await eventually(lambda: events_of(chat, "channel.connected"))
        # The browser vanishes: no close, no goodbye.
        os.kill(gone.pid, signal.SIGKILL)
        await gone.wait()
        ended = await eventually(lambda: _disconnected(chat), timeout_s=20)
        assert ended["data"]["reason"] in ("peer_vanished", "peer_failed")
        # The other call still works.
        await other.say(f"give me access to {unique('rtcstay')}")
        spoken = await eventually(lambda: delivery_with(other, "spoken"), timeout_s=30)
        assert await eventually(lambda: _heard(staying, other, spoken["delivery_id"]))
        assert not await events_of(other, "channel.disconnected")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(gone.pid, signal.SIGKILL)
        await staying.close()


def _noise(ms: int, level: int, *, seed: int) -> bytes:
    """Broadband noise with no words in it: a cough when loud and short, hiss when low."""
    rng = random.Random(seed)
    samples = [max(-32000, min(32000, int(rng.gauss(0, level)))) for _ in range(ms * 8)]
    return pcm16_to_ulaw(struct.pack(f"<{len(samples)}h", *samples))


async def test_a_cough_and_hiss_over_the_closing_cut_nothing(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    peer = await _dial(stack, chat)
    try:
        name = unique("rtccough")
        await chat.say(f"give me access to {name}")
        sent = await eventually(lambda: delivery_with(chat, "sent"), timeout_s=20)
        # 0.5 s into the closing: a cough, then line hiss, through Opus like a browser's.
        await peer.wait_voiced(25)
        await peer.talk(
            _noise(300, 4000, seed=3) + silence_ulaw(300) + _noise(800, 150, seed=4)
            + silence_ulaw(300)
        )
        spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=20)
        assert spoken["delivery_id"] == sent["delivery_id"]
        assert not peer.clears
        assert not await events_of(chat, "control.barge_in")
        finished = await events_of(chat, "playback.finished", delivery_id=sent["delivery_id"])
        assert [e["data"]["heard"] for e in finished] == [True]
        # History keeps what was played, once.
        messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
        assert [m["text"] for m in messages] == [sent["text"]]
    finally:
        await peer.close()


async def test_a_surface_killed_mid_call_ends_it_and_the_closing_waits_for_the_next_channel(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    # The page never plays: the closing stays `sent` on this call when the surface dies.
    doomed = await _dial(stack, chat, play=False)
    name = unique("rtckill")
    await chat.say(f"give me access to {name}")
    first = await eventually(lambda: delivery_with(chat, "sent"), timeout_s=20)
    surface = stack.procs["interaction_surface"]
    surface.kill9()
    try:
        surface.start()
        # The restarted surface's sweep finds the dead owner's call: it ended, and the
        # closing it held goes back for the session's next channel.
        unheard = await eventually(
            lambda: events_of(chat, "delivery.unheard", delivery_id=first["delivery_id"]),
            timeout_s=40,
        )
        assert [e["data"]["reason"] for e in unheard] == ["call_lost"]
        lost = await events_of(chat, "channel.disconnected")
        assert [e["data"]["connection_id"] for e in lost] == [f"call_{doomed.call_id}"]
        assert not [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
        # Nothing admitted is lost; the next call hears the closing, once.
        assert [o["status"] for o in (await chat.snapshot())["operations"]] == ["committed"]
        assert await ledger(stack, name) == 1
        peer = await _dial(stack, chat)
        try:
            spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
            assert spoken["delivery_id"] == first["delivery_id"]
            assert await eventually(lambda: _heard(peer, chat, first["delivery_id"]))
            messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
            assert [m["delivery_id"] for m in messages] == [first["delivery_id"]]
        finally:
            await peer.close()
    finally:
        await doomed.close()
        if surface.proc is None or surface.proc.poll() is not None:
            surface.start()
