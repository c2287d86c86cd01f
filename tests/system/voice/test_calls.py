"""Calls against the running system: Twilio protocol, sessions, playback truth, barge-in."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from services.interaction_surface.voice.codec import silence_ulaw
from services.interaction_surface.voice.twilio import twilio_signature
from testkit.phone import AUTH_TOKEN, CUT, Phone, answered, speech
from testkit.surface import SurfaceStack, effects, eventually, open_chat
from testkit.voice import (
    ask_by_voice_with_a_slow_provider,
    call_in,
    closing_on_a_dead_line,
    delivery_with,
    events_of,
    heard,
    ledger,
    metric,
    unique,
)


async def test_twiml_connects_a_stream_with_parameters(client: httpx.AsyncClient) -> None:
    form = {"CallSid": "CA123", "From": "+1 555 0100", "To": "+15550199"}
    url = f"{client.base_url}/v1/telephony/twilio/voice?tenant_id=acme"
    signed = {"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, url, form)}
    answer = await client.post(
        "/v1/telephony/twilio/voice?tenant_id=acme", data=form, headers=signed
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("application/xml")
    body = answer.text
    assert re.search(r'<Connect><Stream url="ws://[^"]+/v1/telephony/twilio">', body)
    assert '<Parameter name="user_id" value="tel-15550100"/>' in body
    assert '<Parameter name="tenant_id" value="acme"/>' in body
    chat = await open_chat(client)
    resume = f"/v1/telephony/twilio/voice?session_id={chat.session_id}&token={chat.token}"
    signed = {"X-Twilio-Signature": twilio_signature(AUTH_TOKEN, f"{client.base_url}{resume}",
                                                     form)}
    body = (await client.post(resume, data=form, headers=signed)).text
    assert f'<Parameter name="session_id" value="{chat.session_id}"/>' in body
    forged = await client.post(
        "/v1/telephony/twilio/voice", data=form, headers={"X-Twilio-Signature": "bad"}
    )
    assert forged.status_code == 403


async def test_unsigned_stream_is_refused(stack: SurfaceStack) -> None:
    url = stack.url.replace("http://", "ws://") + "/v1/telephony/twilio"
    with pytest.raises(InvalidStatus) as refused:
        await connect(url, additional_headers={"X-Twilio-Signature": "forged"})
    assert refused.value.response.status_code == 403


async def test_protocol_tolerance_and_bad_frames(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    before_json = await metric(client, "holdline_telephony_frames_rejected_total",
                               reason="malformed_json")
    before_b64 = await metric(client, "holdline_telephony_frames_rejected_total",
                              reason="invalid_base64")
    phone = Phone(stack.url, {"session_id": chat.session_id, "token": chat.token})
    await phone.dial(extra={"somethingNew": {"nested": True}})
    await phone.send("{garbage")
    await phone.send({"event": "media", "streamSid": phone.stream_sid,
                      "media": {"payload": "%%%not-base64%%%"}})
    await phone.send(b"\x00\x01binary")
    await phone.send({"event": "holiday", "x": 1})
    await phone.send({"event": "dtmf", "sequenceNumber": "9", "dtmf": {"digit": "5"}})
    await phone.send({"event": "mark", "mark": {"name": "never-sent"}})
    await phone.talk(silence_ulaw(400), realtime=False)
    await phone.hang_up()

    async def connected_then_stopped() -> list[dict[str, Any]] | None:
        events = [e for e in await chat.timeline()
                  if e["type"] in ("channel.connected", "channel.disconnected")]
        return events if len(events) == 2 else None

    events = await eventually(connected_then_stopped)
    assert events[0]["data"] == {"channel": "voice", "connection_id": f"call_{phone.call_sid}"}
    assert events[1]["data"]["reason"] == "stop"
    # The stream's frames are handled in order: once its `stop` is recorded, every bad frame
    # sent before it has been counted (and the connection survived each of them).
    assert await metric(client, "holdline_telephony_frames_rejected_total",
                        reason="malformed_json") == before_json + 1
    assert await metric(client, "holdline_telephony_frames_rejected_total",
                        reason="invalid_base64") == before_b64 + 1
    # The surface still answers calls after all that.
    again = await call_in(stack.url, chat)
    await again.hang_up()


async def test_a_call_for_an_unknown_session_is_refused(stack: SurfaceStack) -> None:
    phone = Phone(stack.url, {"session_id": "s_nope", "token": "wrong"})
    await phone.dial()
    assert phone._reader is not None
    await asyncio.wait_for(phone._reader, 5)
    assert phone.ws is not None
    assert phone.ws.close_code == 4404


async def test_a_call_opens_a_session_for_a_caller(stack: SurfaceStack) -> None:
    user = unique("caller-")
    phone = Phone(stack.url, {})
    phone.params = await answered(stack.url, phone.call_sid, f"user_id={user}&tenant_id=acme")
    await phone.dial()
    await phone.talk(silence_ulaw(200), realtime=False)
    await phone.hang_up(stop=False)
    async with httpx.AsyncClient(base_url=stack.url) as http:
        started = await metric(http, "holdline_telephony_calls_total", outcome="started")
    assert started >= 1


async def test_closing_is_spoken_on_the_call_and_heard_once(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat, speed=4.0)
    name = unique("voicegit")
    answer = await chat.say(f"give me access to {name}")
    batch = answer["operations"][0]["batch_id"]
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=20)
    assert spoken["batch_id"] == batch
    utterance = await phone.wait_for(spoken["delivery_id"])
    assert utterance.audio_ms > 500
    assert utterance.returned_at is not None
    assert not utterance.flushed
    snapshot = await chat.snapshot()
    closing = [m for m in snapshot["messages"] if m["delivery_id"] == spoken["delivery_id"]]
    assert len(closing) == 1
    assert await ledger(stack, name) == 1
    types = [e["type"] for e in await chat.timeline()]
    assert "playback.started" in types
    assert "playback.finished" in types
    await phone.hang_up()


async def test_disconnect_with_pending_closing_then_next_call_hears_it(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    params = {"session_id": chat.session_id, "token": chat.token}
    # The closing reaches the first call, which never plays it, then the caller hangs up.
    dead, name, delivery_id = await closing_on_a_dead_line(stack.url, chat, "voicejira")
    first = {"delivery_id": delivery_id}
    await dead.hang_up(stop=False)

    async def unheard_recorded() -> bool:
        return any(e["type"] == "delivery.unheard" for e in await chat.timeline())

    await eventually(unheard_recorded)

    async def put_back() -> dict[str, Any] | None:
        found: dict[str, Any] = (await chat.snapshot())["deliveries"][0]
        return found if found["status"] in ("pending", "waiting") else None

    # The policy puts the unheard closing back (requeued, shorter) for the next contact.
    await eventually(put_back)
    assert not [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    # A new call on the same session hears it (in its shorter form).
    phone = Phone(stack.url, params, speed=4.0)
    await phone.dial()
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=20)
    assert spoken["delivery_id"] == first["delivery_id"]
    heard = await phone.wait_for(spoken["delivery_id"])
    assert not heard.flushed
    messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    assert len(messages) == 1
    assert await ledger(stack, name) == 1
    await phone.hang_up()


async def test_barge_in_clears_the_closing_keeps_the_operation_and_retries_shorter(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat)
    name = unique("voiceslack")
    await chat.say(f"give me access to {name}")
    first = await eventually(lambda: delivery_with(chat, "sent"))
    # 0.6 s into the closing.
    await phone.wait_playing(600)
    # The caller talks over the closing: real speech, at real-time pace.
    await phone.talk(await speech("wait, one moment please"))
    assert phone.clears, "no clear was sent"
    # Sent at the pace it plays, the closing was cut before its mark went out.
    flushed = [u for u in phone.utterances if u.flushed]
    assert [u.mark for u in flushed] == [CUT]

    async def barge() -> dict[str, Any] | None:
        for event in await chat.timeline():
            if event["type"] == "control.barge_in":
                found: dict[str, Any] = event
                return found
        return None

    event = await eventually(barge)
    assert event["delivery_id"] == first["delivery_id"]
    assert 200 <= event["data"]["played_ms"] <= flushed[0].audio_ms
    assert event["data"]["unheard_ms"] > 0
    # After the quiet window the closing comes back, shorter, and is heard this time: on its
    # own or riding on the reply to what the caller said.
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=25)
    assert spoken["delivery_id"] == first["delivery_id"]
    again = await heard(phone, chat, first["delivery_id"])
    assert again is not flushed[0]
    assert len(await events_of(chat, "delivery.requeued", delivery_id=first["delivery_id"])) == 1
    messages = [m for m in (await chat.snapshot())["messages"] if m["delivery_id"]]
    assert len(messages) == 1
    operations = (await chat.snapshot())["operations"]
    assert [o["status"] for o in operations] == ["committed"]
    assert await ledger(stack, name) == 1
    await phone.hang_up()


async def test_a_blip_shorter_than_min_speech_does_not_interrupt(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat, speed=2.0)
    await chat.say(f"give me access to {unique('voiceblip')}")
    await phone.wait_audio()
    voiced = await speech("ah", tail_silence_ms=0)
    middle = len(voiced) // 2
    await phone.talk(silence_ulaw(100) + voiced[middle : middle + 320] + silence_ulaw(600))
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=20)
    assert not phone.clears
    assert not [u for u in phone.utterances if u.flushed]
    assert spoken["status"] == "spoken"
    types = [e["type"] for e in await chat.timeline()]
    assert "control.barge_in" not in types
    assert "speech.started" not in types
    await phone.hang_up()


async def test_barge_in_during_the_acceptance_truncates_history_and_keeps_the_batch(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    phone = await call_in(stack.url, chat)
    await ask_by_voice_with_a_slow_provider(stack, phone)
    # 0.5 s into the acceptance.
    await phone.wait_playing(500)
    await phone.talk(await speech("wait one moment please"))
    assert phone.clears

    async def truncated() -> dict[str, Any] | None:
        for event in await chat.timeline():
            if event["type"] == "reply.truncated":
                found: dict[str, Any] = event
                return found
        return None

    cut = await eventually(truncated)
    events = await chat.timeline()
    said = [e for e in events if e["type"] == "turn.received"]
    assert said[0]["data"]["channel"] == "voice"
    assert said[0]["data"]["text"] == "give me access to notion and gitlab"
    reply = next(e for e in events if e["type"] == "turn.replied"
                 and e["turn_id"] == cut["turn_id"])
    full = reply["data"]["text"]
    barge = next(e for e in events if e["type"] == "control.barge_in")
    assert barge["response_id"] == cut["response_id"]
    assert barge["data"]["played_ms"] >= 300
    assert barge["data"]["unheard_ms"] > 0
    # History keeps only what was heard: a strict prefix of the acceptance.
    heard = cut["data"]["text"]
    messages = (await chat.snapshot())["messages"]
    # A closing may ride on a later reply of the same call; it carries its delivery id.
    acceptance = [m for m in messages if m["turn_id"] == cut["turn_id"]
                  and m["role"] == "assistant" and m["delivery_id"] is None]
    assert len(acceptance) <= 1
    kept = acceptance[0]["text"] if acceptance else ""
    assert kept == heard
    assert len(kept) < len(full)
    assert full.startswith(kept)
    # The business was not cancelled: every access commits once and closes once.
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
    snapshot = await chat.snapshot()
    batch_ops = [o for o in snapshot["operations"] if o["batch_id"] == spoken["batch_id"]]
    assert sorted(o["status"] for o in batch_ops) == ["committed"] * 2
    for name in ("notion", "gitlab"):
        assert await effects(stack, name) == 1
    closings = [m for m in snapshot["messages"] if m["delivery_id"] == spoken["delivery_id"]]
    assert len(closings) == 1
    await phone.hang_up()
