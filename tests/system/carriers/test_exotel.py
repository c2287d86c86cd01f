"""An Exotel call against the real services: the Voicebot applet's URL answered with a
stream URL, a caller speaking PCM over Exotel's stream protocol (real espeak-ng audio), the
acceptance, a barge-in that sends `clear`, and the closing heard when its mark comes back."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from testkit.carrier_phones import (
    EXOTEL_PASSWORD,
    EXOTEL_USER,
    ExotelPhone,
    basic,
    exotel_answered,
    sessions_opened,
)
from testkit.phone import CUT, speech
from testkit.surface import SurfaceStack, eventually, open_chat
from testkit.voice import delivery_with, events_of, heard, metric, unique

from .slow import slow_spoken_request

REJECTED = "holdline_telephony_frames_rejected_total"


async def test_the_voicebot_url_answers_a_stream_url_with_parameters(
    client: httpx.AsyncClient,
) -> None:
    path = "/v1/telephony/exotel/voicebot?CallSid=exo-1&CallFrom=09876543210&tenant_id=acme"
    answer = await client.get(path, headers={"Authorization": basic()})
    assert answer.status_code == 200, answer.text
    url = urlsplit(answer.json()["url"])
    assert url.scheme == "ws"
    assert url.path == "/v1/telephony/exotel"
    assert (url.username, url.password) == (EXOTEL_USER, EXOTEL_PASSWORD)
    params = dict(parse_qsl(url.query))
    assert set(params) == {"user_id", "tenant_id", "ticket"}
    assert params["user_id"] == "tel-09876543210"
    assert len(url.query) <= 256
    for headers in ({}, {"Authorization": basic(password="wrong")}):
        assert (await client.get(path, headers=headers)).status_code == 403
    # The stream itself needs the credentials too.
    stream = str(client.base_url).replace("http://", "ws://") + "/v1/telephony/exotel"
    with pytest.raises(InvalidStatus) as refused:
        await connect(stream, additional_headers={"Authorization": basic(password="no")})
    assert refused.value.response.status_code == 403


async def test_request_acceptance_barge_in_clears_and_the_closing_heard(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    params = await exotel_answered(
        stack.url, "exo-call-1", f"session_id={chat.session_id}&token={chat.token}"
    )
    phone = ExotelPhone(stack.url, params, call_sid="exo-call-1")
    await phone.dial()
    interruption = await speech("wait one moment please")
    await slow_spoken_request(stack, phone)
    await phone.wait_playing(500)
    await phone.talk(interruption)
    assert phone.clears, "no clear was sent"
    assert [u.mark for u in phone.utterances if u.flushed][:1] == [CUT]
    (barge,) = await eventually(lambda: events_of(chat, "control.barge_in"))
    assert barge["data"]["unheard_ms"] > 0
    assert await eventually(lambda: events_of(chat, "reply.truncated"))
    # The closing is heard: its mark came back with no clear while it was pending.
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
    utterance = await heard(phone, chat, spoken["delivery_id"])
    assert utterance.audio_ms > 500
    operations = (await chat.snapshot())["operations"]
    assert sorted(o["status"] for o in operations) == ["committed", "committed"]
    await phone.hang_up()


async def test_forged_and_replayed_starts_store_nothing(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    user = unique("ex-")
    params = await exotel_answered(stack.url, "exo-call-2", f"user_id={user}&tenant_id=acme")
    honest = ExotelPhone(stack.url, params, call_sid="exo-call-2")
    await honest.dial()

    async def opened() -> list[str]:
        return await sessions_opened(stack.nats_url, stack.prefix, user)

    (session,) = await eventually(opened)
    before = await metric(client, REJECTED, reason="ticket_replayed")
    forgeries: list[tuple[dict[str, Any], str]] = [
        (params, "exo-call-2"),  # the same ticket again
        (params, "exo-call-3"),  # another call
        ({**params, "ticket": params["ticket"][:-2] + "xx"}, "exo-call-2"),
        ({k: v for k, v in params.items() if k != "ticket"}, "exo-call-2"),
    ]
    for forged, call_sid in forgeries:
        phone = ExotelPhone(stack.url, forged, call_sid=call_sid)
        await phone.dial()
        assert phone._reader is not None
        assert phone.ws is not None
        await asyncio.wait_for(phone._reader, 10)
        assert phone.ws.close_code == 4403
    assert await metric(client, REJECTED, reason="ticket_replayed") == before + 1
    assert await opened() == [session]
    await honest.hang_up()


async def test_malformed_frames_are_counted_and_ignored(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    params = await exotel_answered(
        stack.url, "exo-call-4", f"session_id={chat.session_id}&token={chat.token}"
    )
    reasons = ("malformed_json", "invalid_base64", "binary_frame", "unknown_event")
    before = {r: await metric(client, REJECTED, reason=r) for r in reasons}
    phone = ExotelPhone(stack.url, params, call_sid="exo-call-4")
    await phone.dial(extra={"something_new": {"nested": True}})
    await phone.send("{garbage")
    await phone.send({"event": "media", "stream_sid": phone.stream_sid,
                      "media": {"payload": "%%%not-base64%%%"}})
    await phone.send(b"\x00\x01binary")
    await phone.send({"event": "holiday"})
    await chat.say(f"give me access to {unique('exotelgit')}")
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=20)
    assert await heard(phone, chat, spoken["delivery_id"])
    for reason, count in before.items():
        assert await metric(client, REJECTED, reason=reason) == count + 1, reason
    await phone.hang_up()
