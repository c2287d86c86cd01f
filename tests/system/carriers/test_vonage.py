"""A Vonage call against the real services: the signed answer webhook's NCCO, a caller
speaking L16 over Vonage's WebSocket protocol (real espeak-ng audio), the acceptance, a
barge-in that stops the agent's audio, and the closing counted heard by the wire's clock."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx

from testkit.carrier_phones import (
    VONAGE_SECRET,
    VonagePhone,
    sessions_opened,
    vonage_answered,
    vonage_token,
)
from testkit.phone import speech
from testkit.surface import SurfaceStack, eventually, open_chat
from testkit.voice import delivery_with, events_of, metric, unique

from .slow import slow_spoken_request

REJECTED = "holdline_telephony_frames_rejected_total"


async def test_the_signed_answer_webhook_connects_a_websocket(
    client: httpx.AsyncClient,
) -> None:
    endpoint = await vonage_answered(str(client.base_url), "call-1", "tenant_id=acme")
    assert endpoint["type"] == "websocket"
    assert endpoint["uri"].endswith("/v1/telephony/vonage")
    assert endpoint["content-type"] == "audio/l16;rate=16000"
    headers = endpoint["headers"]
    assert headers["call_uuid"] == "call-1"
    assert headers["user_id"] == "tel-447700900000"
    assert headers["tenant_id"] == "acme"
    assert headers["ticket"].startswith("v1.")
    # A GET signs its query as JSON; a token for another payload, or another secret, is refused.
    query = "to=447700900001&from=447700900000&uuid=call-2"
    payload = json.dumps({"to": "447700900001", "from": "447700900000", "uuid": "call-2"},
                         separators=(",", ":")).encode()
    path = f"/v1/telephony/vonage/answer?{query}"
    good = await client.get(path, headers={"Authorization": f"Bearer {vonage_token(payload)}"})
    assert good.status_code == 200, good.text
    tampered = await client.get(
        path.replace("call-2", "call-3"),
        headers={"Authorization": f"Bearer {vonage_token(payload)}"},
    )
    assert tampered.status_code == 403
    forged = vonage_token(payload, secret=VONAGE_SECRET[::-1])
    assert (await client.get(path, headers={"Authorization": f"Bearer {forged}"})
            ).status_code == 403
    assert (await client.get(path)).status_code == 403


async def test_request_acceptance_barge_in_and_the_closing_heard(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    endpoint = await vonage_answered(
        stack.url, str(uuid.uuid4()), f"session_id={chat.session_id}&token={chat.token}"
    )
    phone = VonagePhone(stack.url, endpoint["headers"])
    await phone.dial()
    interruption = await speech("wait one moment please")
    await slow_spoken_request(stack, phone)
    # 0.5 s into the (voice) acceptance the caller cuts in, at real-time pace.
    await phone.wait_playing(500)
    talking = asyncio.create_task(phone.talk(interruption))
    (barge,) = await eventually(lambda: events_of(chat, "control.barge_in"))
    # Vonage takes no clear: the wire stopped sending, so the audio stops short.
    got = phone.media_ms()
    await asyncio.sleep(0.5)
    assert phone.media_ms() - got <= 300, "the agent kept talking after the barge-in"
    heard_so_far = phone.media_ms()
    await talking
    started = [e for e in await events_of(chat, "playback.started")
               if e.get("response_id") == barge["response_id"]]
    assert heard_so_far < started[0]["data"]["duration_ms"]
    assert barge["data"]["unheard_ms"] > 0
    assert await eventually(lambda: events_of(chat, "reply.truncated"))
    # The closing: spoken only once the wire's clock says its audio played.
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
    finished = [e for e in await events_of(chat, "playback.finished")
                if e["data"]["heard"] and e.get("delivery_id") == spoken["delivery_id"]]
    riding = [e for e in await events_of(chat, "turn.replied")
              if spoken["delivery_id"] in e["data"].get("attached_delivery_ids", [])]
    assert finished or riding, "no heard playback carried the closing"
    operations = (await chat.snapshot())["operations"]
    assert sorted(o["status"] for o in operations) == ["committed", "committed"]
    assert phone.frame_sizes == {640}, "not 20 ms of 16 kHz L16 a message"
    await phone.hang_up()


async def test_forged_and_replayed_starts_store_nothing(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    user = unique("vn-")
    endpoint = await vonage_answered(stack.url, "call-x", f"user_id={user}&tenant_id=acme")
    params: dict[str, Any] = endpoint["headers"]
    honest = VonagePhone(stack.url, params)
    await honest.dial()

    async def opened() -> list[str]:
        return await sessions_opened(stack.nats_url, stack.prefix, user)

    (session,) = await eventually(opened)
    before = await metric(client, REJECTED, reason="ticket_replayed")
    for forged, code in (
        (params, 4403),  # the same ticket again
        ({**params, "ticket": params["ticket"][:-2] + "xx"}, 4403),
        ({**params, "user_id": unique("vn-")}, 4403),  # the parameters changed
        ({k: v for k, v in params.items() if k != "ticket"}, 4403),
    ):
        phone = VonagePhone(stack.url, forged)
        await phone.dial()
        assert phone._reader is not None
        assert phone.ws is not None
        await asyncio.wait_for(phone._reader, 10)
        assert phone.ws.close_code == code
    assert await metric(client, REJECTED, reason="ticket_replayed") == before + 1
    assert await opened() == [session]
    await honest.hang_up()


async def test_malformed_messages_are_counted_and_ignored(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    endpoint = await vonage_answered(
        stack.url, str(uuid.uuid4()), f"session_id={chat.session_id}&token={chat.token}"
    )
    before = {r: await metric(client, REJECTED, reason=r)
              for r in ("malformed_json", "unknown_event", "bad_dtmf")}
    phone = VonagePhone(stack.url, endpoint["headers"])
    await phone.dial()
    await phone.send("{garbage")
    await phone.send({"event": "websocket:holiday"})
    await phone.send({"event": "websocket:dtmf", "digit": "x"})
    await chat.say(f"give me access to {unique('vonagegit')}")
    await phone.wait_audio()
    for reason, count in before.items():
        assert await metric(client, REJECTED, reason=reason) == count + 1, reason
    await phone.hang_up()
