"""Calls over Telnyx media streaming and Plivo audio streams against the running system.

Each test runs once per carrier: a phone speaking that carrier's protocol (`testkit.dialects`)
with real espeak-ng speech, set up by that carrier's signed webhook (`testkit.carriers`).
A request by voice gets its acceptance, the caller's barge-in clears it, and exactly one
closing is heard (its mark or checkpoint returned); a signed webhook's ticket opens one
session once, and forged, replayed or foreign tickets are refused with 4403 before anything
is stored; forged webhooks get 403; malformed frames are counted and the call goes on.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.interaction_surface.voice.codec import silence_ulaw
from services.interaction_surface.voice.trust import TrustSettings, issue_ticket
from testkit.carriers import (
    opened,
    plivo_answered,
    plivo_form,
    plivo_signed,
    telnyx_answered,
    telnyx_form,
    telnyx_signed,
)
from testkit.dialects import PLIVO, TELNYX, Dialect
from testkit.phone import AUTH_TOKEN, Phone, speech
from testkit.surface import SurfaceStack, effects, eventually, open_chat
from testkit.voice import (
    SPOKEN_RESOURCES,
    ask_by_voice_with_a_slow_provider,
    delivery_with,
    heard,
    metric,
    unique,
)

REJECTED = "holdline_telephony_frames_rejected_total"
Answered = Callable[[str, str, str], Awaitable[dict[str, str]]]


@dataclass(frozen=True)
class Carrier:
    """One carrier as the tests drive it."""

    name: str
    dialect: Dialect
    answered: Answered

    def phone(self, stack: SurfaceStack, params: dict[str, str], call_id: str,
              **options: Any) -> Phone:
        return Phone(stack.url, params, dialect=self.dialect, call_sid=call_id, **options)


CARRIERS = [
    pytest.param(Carrier("telnyx", TELNYX, telnyx_answered), id="telnyx"),
    pytest.param(Carrier("plivo", PLIVO, plivo_answered), id="plivo"),
]


async def closed_with(phone: Phone) -> int | None:
    """The close code the surface sent after the start."""
    assert phone._reader is not None
    assert phone.ws is not None
    await asyncio.wait_for(phone._reader, 10)
    return phone.ws.close_code


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_request_acceptance_barge_in_and_one_closing_heard(
    carrier: Carrier, stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    call_id = f"{carrier.name}-{uuid.uuid4().hex}"
    query = urlencode({"session_id": chat.session_id, "token": chat.token})
    params = await carrier.answered(stack.url, call_id, query)
    assert (params["session_id"], params["token"]) == (chat.session_id, chat.token)
    phone = carrier.phone(stack, params, call_id)
    await phone.dial()
    # Both carriers' calls ask for the same accesses (as different users) on one provider.
    effects_before = {name: await effects(stack, name) for name in SPOKEN_RESOURCES}
    await ask_by_voice_with_a_slow_provider(stack, phone)
    # The acceptance plays; 0.5 s into it the caller cuts in with real speech.
    await phone.wait_playing(500)
    await phone.talk(await speech("wait one moment please"))
    assert phone.clears, "the barge-in sent no clear"
    types = [e["type"] for e in await chat.timeline()]
    assert "control.barge_in" in types
    # The operations were not cancelled: the closing comes once, and its mark (Telnyx) or
    # checkpoint (Plivo) comes back from a phone that played it with no clear in between.
    spoken = await eventually(lambda: delivery_with(chat, "spoken"), timeout_s=30)
    utterance = await heard(phone, chat, spoken["delivery_id"])
    assert utterance.audio_ms > 300
    snapshot = await chat.snapshot()
    closings = [m for m in snapshot["messages"] if m["delivery_id"] == spoken["delivery_id"]]
    assert len(closings) == 1
    batch = [o for o in snapshot["operations"] if o["batch_id"] == spoken["batch_id"]]
    assert sorted(o["status"] for o in batch) == ["committed"] * len(SPOKEN_RESOURCES)
    for name in SPOKEN_RESOURCES:
        assert await effects(stack, name) == effects_before[name] + 1
    await phone.hang_up()


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_a_ticket_opens_one_session_once_and_forgeries_store_nothing(
    carrier: Carrier, stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    user = unique(f"{carrier.name}-")
    call_id = f"{carrier.name}-{uuid.uuid4().hex}"
    good = await carrier.answered(stack.url, call_id, f"user_id={user}&tenant_id=acme")
    assert set(good) == {"user_id", "tenant_id", "ticket"}
    version, expires, nonce, mac = good["ticket"].split(".")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    bare = {"user_id": user, "tenant_id": "acme"}
    # A ticket Twilio's webhook would issue for the same call: another carrier's key.
    twilio_ticket = issue_ticket(TrustSettings(auth_token=AUTH_TOKEN).ticket_key, call_id,
                                 bare, now=time.time(), ttl_s=300)
    cases: list[tuple[str, dict[str, str], str]] = [
        ("ticket_missing", bare, call_id),
        ("ticket_invalid", {**good, "ticket": f"{version}.{expires}.{nonce}.{flipped}"}, call_id),
        ("ticket_invalid", good, f"{carrier.name}-{uuid.uuid4().hex}"),
        ("ticket_invalid", {**good, "user_id": "victim"}, call_id),
        ("ticket_invalid", {**bare, "ticket": twilio_ticket}, call_id),
    ]
    for reason, params, sid in cases:
        before = await metric(client, REJECTED, reason=reason)
        phone = carrier.phone(stack, params, sid)
        await phone.dial()
        assert await closed_with(phone) == 4403, reason
        assert await metric(client, REJECTED, reason=reason) == before + 1, reason
    assert await opened(stack.nats_url, stack.prefix, user) == []
    # The real ticket was not used up by the refusals: it opens its call, once.
    honest = carrier.phone(stack, good, call_id)
    await honest.dial()
    (session,) = await eventually(
        lambda: opened(stack.nats_url, stack.prefix, user, connected=True), timeout_s=15
    )
    before = await metric(client, REJECTED, reason="ticket_replayed")
    replay = carrier.phone(stack, good, call_id)
    await replay.dial()
    assert await closed_with(replay) == 4403
    assert await metric(client, REJECTED, reason="ticket_replayed") == before + 1
    assert await opened(stack.nats_url, stack.prefix, user) == [session]
    await honest.hang_up()


async def test_telnyx_webhooks_are_checked_as_telnyx_signs_them(
    client: httpx.AsyncClient,
) -> None:
    path = "/v1/telephony/telnyx/voice?tenant_id=acme"
    body = telnyx_form("v3:call")
    assert (await client.post(path, content=body, headers=telnyx_signed(body))).status_code == 200
    forged: list[dict[str, str]] = [
        telnyx_signed(body, key=Ed25519PrivateKey.generate()),
        telnyx_signed(body + b"&x=1"),
        telnyx_signed(body, at=time.time() - 600),
        {"Content-Type": "application/x-www-form-urlencoded"},
    ]
    for headers in forged:
        answer = await client.post(path, content=body, headers=headers)
        assert answer.status_code == 403, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")


async def test_plivo_webhooks_are_checked_as_plivo_signs_them(
    stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    path = "/v1/telephony/plivo/voice?tenant_id=acme"
    url = stack.url.rstrip("/") + path
    form = plivo_form("c-uuid")
    good = plivo_signed(url, form, "nonce-1")
    assert (await client.post(path, data=form, headers=good)).status_code == 200
    forged: list[tuple[dict[str, str], dict[str, str]]] = [
        (form, plivo_signed(url, form, "nonce-1", token="another-token")),
        ({**form, "From": "15550666"}, good),
        (form, {**good, "X-Plivo-Signature-V3-Nonce": "nonce-2"}),
        (form, plivo_signed(url.replace("acme", "other"), form, "nonce-1")),
        (form, {}),
    ]
    for body, headers in forged:
        answer = await client.post(path, data=body, headers=headers)
        assert answer.status_code == 403, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize("carrier", CARRIERS)
async def test_malformed_frames_are_counted_and_ignored(
    carrier: Carrier, stack: SurfaceStack, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    reasons = ("malformed_json", "invalid_base64", "unknown_event", "binary_frame")
    before = {r: await metric(client, REJECTED, reason=r) for r in reasons}
    phone = carrier.phone(stack, {"session_id": chat.session_id, "token": chat.token},
                          f"{carrier.name}-{uuid.uuid4().hex}")
    await phone.dial()
    bad_media = carrier.dialect.media(phone.stream_sid, 1, b"\xff" * 160)
    bad_media["media"]["payload"] = "%%%not-base64%%%"
    await phone.send("{garbage")
    await phone.send(bad_media)
    await phone.send({"event": "holiday", "x": 1})
    await phone.send(b"\x00\x01binary")
    await phone.talk(silence_ulaw(400), realtime=False)

    async def connected() -> bool:
        return "channel.connected" in [e["type"] for e in await chat.timeline()]

    await eventually(connected, timeout_s=15)

    async def counted() -> bool:
        now = {r: await metric(client, REJECTED, reason=r) for r in reasons}
        return all(now[r] == before[r] + 1 for r in reasons)

    await eventually(counted, timeout_s=10)
    # The call survived every one of them: it still ends as the carrier ends it.
    await phone.hang_up()

    async def disconnected() -> bool:
        return "channel.disconnected" in [e["type"] for e in await chat.timeline()]

    await eventually(disconnected, timeout_s=15)
