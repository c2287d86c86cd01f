"""Who may open a phone session, over the real webhook and WebSocket of a real surface.

The signed voice webhook issues a call ticket; a stream's `start` needs that ticket (or the
session's token) or it is closed with 4403 before anything is stored, whatever it forged,
replayed or changed. The durable record (session.opened in the interaction stream) is read
from the broker to prove nothing was stored. Signatures here come from the official
`twilio` package. A surface without `TWILIO_AUTH_TOKEN` serves local requests only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from twilio.request_validator import RequestValidator
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from libs.bus import Context, Topology, read_subject
from libs.bus import connect as bus_connect
from libs.config import BusSettings
from libs.events import INTERACTION, ChannelConnected, SessionOpened
from services.interaction_surface.voice.trust import TrustSettings, issue_ticket
from testkit.phone import AUTH_TOKEN, Phone, answered, twiml_parameters
from testkit.processes import ROOT, Broker, ServiceProcess, free_port
from testkit.surface import eventually, open_chat
from testkit.voice import metric, unique

SHARED_KEY = ("webhooks_sharedkey_test", "shared-secret-for-tests")
REJECTED = "holdline_telephony_frames_rejected_total"
KEY = TrustSettings(auth_token=AUTH_TOKEN).ticket_key
VOICE_PATH = "/v1/telephony/twilio/voice"


@dataclass
class Surface:
    """An interaction surface alone on a prefix of its own: no turn runs a tool here."""

    process: ServiceProcess
    nats_url: str
    prefix: str

    @property
    def url(self) -> str:
        return self.process.base_url


@contextlib.contextmanager
def lone_surface(broker: Broker, logs: Path, env: dict[str, str]) -> Iterator[Surface]:
    port = free_port()
    prefix = f"k{uuid.uuid4().hex[:10]}"
    process = ServiceProcess("interaction_surface", {
        "NATS_URL": broker.url, "HOLDLINE_PREFIX": prefix, "INTERACTION_SURFACE_PORT": str(port),
        "HOLDLINE_STT": "none", "HOLDLINE_LOG_LEVEL": "INFO", **env,
    }, port, logs / "surface.log")
    process.start(timeout_s=60)
    try:
        yield Surface(process, broker.url, prefix)
    finally:
        process.kill9()


@pytest.fixture(scope="module")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Surface]:
    """Signatures checked; this test process may act as the TLS-terminating proxy."""
    env = {
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "TWILIO_WEBHOOK_SHARED_KEYS": ":".join(SHARED_KEY),
        "HOLDLINE_TRUSTED_PROXIES": "127.0.0.1/32",
    }
    with lone_surface(broker, tmp_path_factory.mktemp("tickets"), env) as running:
        yield running


@pytest.fixture
async def client(stack: Surface) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as http:
        yield http


async def opened(stack: Surface, user: str, *, connected: bool = False) -> list[str]:
    """Session ids the durable record opened for `user` (with `connected`: only those whose
    call is recorded as connected)."""
    settings = BusSettings(nats_url=stack.nats_url, prefix=stack.prefix)
    nc = await bus_connect(settings, name="tickets-test")
    try:
        topology = Topology(stack.prefix)
        replayed = await read_subject(
            nc.jetstream(), topology.stream_name(Context.INTERACTION),
            f"{stack.prefix}.interaction.>", INTERACTION,
        )
    finally:
        await nc.close()
    sessions = {i.envelope.session_id for i in replayed.items
                if isinstance(i.envelope.event, SessionOpened)
                and i.envelope.event.user_id == user}
    if connected:
        sessions &= {i.envelope.session_id for i in replayed.items
                     if isinstance(i.envelope.event, ChannelConnected)}
    return sorted(sessions)


async def closed_with(phone: Phone) -> int | None:
    """The close code the surface sent after `start`."""
    assert phone._reader is not None
    assert phone.ws is not None
    await asyncio.wait_for(phone._reader, 10)
    return phone.ws.close_code


async def refused(stack: Surface, params: dict[str, str], call_sid: str) -> int | None:
    phone = Phone(stack.url, params, call_sid=call_sid)
    await phone.dial()
    return await closed_with(phone)


async def test_a_ticket_opens_one_session_once(stack: Surface) -> None:
    user = unique("tk-")
    honest = Phone(stack.url, {})
    honest.params = await answered(stack.url, honest.call_sid, f"user_id={user}&tenant_id=acme")
    assert set(honest.params) == {"user_id", "tenant_id", "ticket"}
    await honest.dial()
    (session,) = await eventually(lambda: opened(stack, user, connected=True), timeout_s=15)
    # The same ticket again, on a second stream (and on the same CallSid): refused.
    async with httpx.AsyncClient(base_url=stack.url) as http:
        before = await metric(http, REJECTED, reason="ticket_replayed")
        assert await refused(stack, honest.params, honest.call_sid) == 4403
        assert await metric(http, REJECTED, reason="ticket_replayed") == before + 1
    assert await opened(stack, user) == [session]
    # The honest call is still up: it hangs up normally.
    await honest.hang_up()
    assert honest.ws is not None
    await asyncio.wait_for(honest.ws.wait_closed(), 10)


async def test_forged_expired_mismatched_or_missing_tickets_store_nothing(
    stack: Surface, client: httpx.AsyncClient
) -> None:
    user = unique("tk-")
    call_sid = f"CA{uuid.uuid4().hex}"
    good = await answered(stack.url, call_sid, f"user_id={user}&tenant_id=acme")
    chat = await open_chat(client)
    version, expires, nonce, mac = good["ticket"].split(".")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    now = time.time()
    cases: list[tuple[str, dict[str, str], str]] = [
        ("ticket_missing", {"user_id": user, "tenant_id": "acme"}, call_sid),
        ("ticket_invalid", {**good, "ticket": f"{version}.{expires}.{nonce}.{flipped}"}, call_sid),
        ("ticket_invalid", good, f"CA{uuid.uuid4().hex}"),  # another call's ticket
        ("ticket_invalid", {**good, "user_id": "victim"}, call_sid),  # parameters changed
        ("ticket_invalid", {**good, "tenant_id": "other"}, call_sid),
        # A token for a session next to a ticket for a new one: they disagree.
        ("ticket_invalid", {**good, "session_id": chat.session_id, "token": chat.token},
         call_sid),
        ("ticket_expired", {
            "user_id": user, "tenant_id": "acme",
            "ticket": issue_ticket(KEY, call_sid, {"user_id": user, "tenant_id": "acme"},
                                   now=now - 1000, ttl_s=300),
        }, call_sid),
        ("ticket_malformed", {**good, "ticket": "v1.not-a-ticket"}, call_sid),
        ("bad_parameters", {**good, "padding": "x" * 4000}, call_sid),
        # Not a flat object of strings: no TwiML of ours says that (refused as it decodes).
        ("bad_parameters", {**good, "nested": cast(str, {"a": "b"})}, call_sid),
    ]
    for reason, params, sid in cases:
        before = await metric(client, REJECTED, reason=reason)
        assert await refused(stack, params, sid) == 4403, reason
        assert await metric(client, REJECTED, reason=reason) == before + 1, reason
    assert await opened(stack, user) == []
    # The chat session was not touched by the disagreeing start.
    kinds = [e["type"] for e in await chat.timeline()]
    assert "channel.connected" not in kinds
    # The real ticket was never used up by the refusals: it still opens its call.
    phone = Phone(stack.url, good, call_sid=call_sid)
    await phone.dial()
    await eventually(lambda: opened(stack, user, connected=True), timeout_s=15)
    await phone.hang_up()


async def test_a_token_continues_a_session_without_a_ticket(
    stack: Surface, client: httpx.AsyncClient
) -> None:
    chat = await open_chat(client)
    query = f"session_id={chat.session_id}&token={chat.token}"
    phone = Phone(stack.url, {})
    phone.params = await answered(stack.url, phone.call_sid, query)
    await phone.dial()

    async def connected() -> bool:
        return "channel.connected" in [e["type"] for e in await chat.timeline()]

    await eventually(connected, timeout_s=15)
    await phone.hang_up()
    # Without the webhook's ticket, the token alone is enough; a wrong token is not.
    direct = Phone(stack.url, {"session_id": chat.session_id, "token": chat.token})
    await direct.dial()
    await direct.hang_up()
    wrong = {"session_id": chat.session_id, "token": "not-the-token"}
    assert await refused(stack, wrong, f"CA{uuid.uuid4().hex}") == 4404


def signed(url: str, form: Any, algorithm: str | None = None, secret: str = AUTH_TOKEN) -> str:
    return RequestValidator(secret).compute_signature(url, form, algorithm)


class Repeated(dict[str, list[str]]):
    def getall(self, key: str) -> list[str]:
        return self[key]


async def test_the_webhook_accepts_what_twilio_signs_and_refuses_bad_input(
    stack: Surface, client: httpx.AsyncClient
) -> None:
    base = stack.url
    port = base.rsplit(":", 1)[1]
    form = {"CallSid": "CA42", "From": "+15550100", "To": "+15550199"}
    url = f"{base}{VOICE_PATH}?tenant_id=acme"

    async def post(signature: str, body: Any = form, headers: dict[str, str] | None = None,
                   path: str = f"{VOICE_PATH}?tenant_id=acme") -> httpx.Response:
        return await client.post(path, data=body, headers={
            "X-Twilio-Signature": signature, **(headers or {})})

    assert (await post(signed(url, form))).status_code == 200
    # A repeated key: every value is signed.
    repeated = Repeated({k: [v] for k, v in form.items()} | {"Digits": ["1", "2"]})
    body = "&".join(f"{k}={v}" for k, vs in repeated.items() for v in vs).replace("+", "%2B")
    answer = await client.post(
        f"{VOICE_PATH}?tenant_id=acme", content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded",
                 "X-Twilio-Signature": signed(url, repeated)})
    assert answer.status_code == 200, answer.text
    # HMAC-SHA256 with a shared key, named by the settings header.
    settings = f"key={SHARED_KEY[0]},algorithm=HMAC_SHA256"
    sha256 = signed(url, form, "HMAC_SHA256", SHARED_KEY[1])
    assert (await post(sha256, headers={
        "X-Twilio-Webhooks-Signature-Settings": settings})).status_code == 200
    assert (await post(sha256)).status_code == 403
    # Behind a proxy that terminates TLS (this process is a trusted proxy here): the https
    # URL is what Twilio signed, with or without :443, and the stream URL is wss://.
    public = f"https://calls.example.com{VOICE_PATH}?tenant_id=acme"
    forwarded = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "calls.example.com"}
    for signed_url in (public, public.replace(".com/", ".com:443/")):
        answer = await post(signed(signed_url, form), headers=forwarded)
        assert answer.status_code == 200, answer.text
        assert re.search(r'<Stream url="wss://calls\.example\.com/v1/telephony/twilio">',
                         answer.text)
    # What is refused, each with a problem+json reason, before anything is issued.
    other = f"http://127.0.0.1:{port}{VOICE_PATH}?tenant_id=other"
    bad: list[tuple[int, httpx.Response]] = [
        (403, await post(signed(other, form))),  # a signature over another URL
        (403, await post(signed(url, {**form, "From": "+1"}))),
        (413, await post(signed(url, form), body={"x": "y" * 70_000})),
        (400, await client.post(f"{VOICE_PATH}?tenant_id=acme", content=b"From=%FF%FE",
                                headers={"Content-Type": "application/x-www-form-urlencoded",
                                         "X-Twilio-Signature": "x"})),
        (400, await post(signed(url.replace("acme", "bad%20id"), form),
                         path=f"{VOICE_PATH}?tenant_id=bad%20id")),
        (400, await post(signed(url, {"From": "+15550100"}), body={"From": "+15550100"})),
    ]
    for status, answer in bad:
        assert answer.status_code == status, answer.text
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert answer.json()["status"] == status
    # The stream's upgrade, behind the same proxy: signed over the wss:// URL.
    ws_url = base.replace("http://", "ws://") + "/v1/telephony/twilio"
    wss = "wss://calls.example.com/v1/telephony/twilio"
    async with connect(ws_url, additional_headers={**forwarded,
                                                   "X-Twilio-Signature": signed(wss, {})}):
        pass
    with pytest.raises(InvalidStatus):
        await connect(ws_url, additional_headers={
            **forwarded, "X-Twilio-Signature": signed(ws_url, {})})


# ---------------------------------------------------------------------- no auth token


@pytest.fixture(scope="module")
def open_surface(
    broker: Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceProcess]:
    """A surface without TWILIO_AUTH_TOKEN (as `make run` starts it)."""
    logs = tmp_path_factory.mktemp("open-surface")
    with lone_surface(broker, logs, {"TWILIO_AUTH_TOKEN": ""}) as running:
        yield running.process


async def test_without_an_auth_token_only_local_callers_open_sessions(
    open_surface: ServiceProcess,
) -> None:
    # The start-up check said so, once.
    assert open_surface.tail(400).count("TWILIO_AUTH_TOKEN is not set") == 1, open_surface.tail()
    base = open_surface.base_url
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        local = await http.post(VOICE_PATH, data={"CallSid": "CA1", "From": "+15550100"})
        assert local.status_code == 200
        params = twiml_parameters(local.text)
        assert set(params) == {"user_id", "tenant_id"}  # no ticket: nothing could sign it
        proxied = await http.post(VOICE_PATH, data={"CallSid": "CA1"},
                                  headers={"X-Forwarded-For": "203.0.113.9"})
        assert proxied.status_code == 403
        assert proxied.headers["content-type"].startswith("application/problem+json")
        phone = Phone(base, params)
        await phone.dial()
        await phone.hang_up()

        async def started() -> bool:
            return await metric(http, "holdline_telephony_calls_total", outcome="started") >= 1

        await eventually(started, timeout_s=10)
        # The same start through a proxy (not local) is refused before anything is stored.
        before = await metric(http, REJECTED, reason="not_local")
        ws = base.replace("http://", "ws://") + "/v1/telephony/twilio"
        async with connect(ws, additional_headers={"X-Forwarded-For": "203.0.113.9"}) as sock:
            await sock.send('{"event": "start", "start": {"callSid": "CA9", '
                            '"customParameters": {"user_id": "u1", "tenant_id": "acme"}}}')
            with contextlib.suppress(ConnectionClosed):
                await asyncio.wait_for(sock.recv(), 10)
        assert sock.close_code == 4403
        assert await metric(http, REJECTED, reason="not_local") == before + 1


def test_production_refuses_to_start_without_the_auth_token(tmp_path: Path) -> None:
    env = {**os.environ, "HOLDLINE_REQUIRE_TWILIO_AUTH": "1", "TWILIO_AUTH_TOKEN": "",
           "NATS_URL": "nats://127.0.0.1:9", "INTERACTION_SURFACE_PORT": str(free_port())}
    done = subprocess.run([sys.executable, "-m", "services.interaction_surface"], cwd=ROOT,
                          env=env, capture_output=True, timeout=60, check=False)
    assert done.returncode != 0
    assert b"TWILIO_AUTH_TOKEN is not set" in done.stderr
