"""The carriers' side of a call's set-up, for tests: Telnyx's and Plivo's signed webhooks.

`telnyx_answered` posts the TeXML voice webhook as Telnyx does (a form body, Ed25519-signed
with a key whose public half the surface is given) and returns the `<Parameter>`s of the
TeXML's stream; `plivo_answered` posts Plivo's answer URL signed with `X-Plivo-Signature-V3`
(the official `plivo` SDK computes the signature) and returns the parameters packed in the
`<Stream extraHeaders>`. `opened` reads the durable record: the sessions opened for a user.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from urllib.parse import urlencode
from xml.sax.saxutils import unescape

import httpx
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from plivo.utils.signature_v3 import construct_post_url, get_signature_v3

from libs.bus import Context, Topology, read_subject
from libs.bus import connect as bus_connect
from libs.config import BusSettings
from libs.events import INTERACTION, ChannelConnected, SessionOpened
from services.interaction_surface.voice.plivo_frames import unpack_extra_headers

from .phone import twiml_parameters

TELNYX_KEY = Ed25519PrivateKey.generate()
TELNYX_PUBLIC_KEY = base64.b64encode(
    TELNYX_KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
).decode()
PLIVO_AUTH_TOKEN = "plivo-test-auth-token-0123456789"
CARRIER_ENV = {
    "TELNYX_PUBLIC_KEY": TELNYX_PUBLIC_KEY,
    "HOLDLINE_TELNYX_TICKET_SECRET": "telnyx-ticket-secret-for-tests",
    "PLIVO_AUTH_TOKEN": PLIVO_AUTH_TOKEN,
}
_EXTRA = re.compile(r'extraHeaders="([^"]*)"')


def telnyx_signed(body: bytes, *, key: Ed25519PrivateKey = TELNYX_KEY,
                  at: float | None = None) -> dict[str, str]:
    """Telnyx's signature headers for a webhook body."""
    timestamp = str(int(time.time() if at is None else at))
    signature = key.sign(timestamp.encode() + b"|" + body)
    return {"Telnyx-Signature-Ed25519": base64.b64encode(signature).decode(),
            "Telnyx-Timestamp": timestamp, "Content-Type": "application/x-www-form-urlencoded"}


def telnyx_form(call_id: str) -> bytes:
    """A TeXML voice webhook's form for a call."""
    return urlencode({"CallSid": call_id, "AccountSid": str(uuid.uuid4()),
                      "From": "+15550100", "To": "+15550199", "CallStatus": "ringing",
                      "Direction": "inbound"}).encode()


async def telnyx_answered(base_url: str, call_id: str, query: str = "") -> dict[str, str]:
    """The stream parameters of the TeXML the signed webhook answers for `call_id`."""
    path = "/v1/telephony/telnyx/voice" + (f"?{query}" if query else "")
    body = telnyx_form(call_id)
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        answer = await http.post(path, content=body, headers=telnyx_signed(body))
    assert answer.status_code == 200, answer.text
    return twiml_parameters(answer.text)


def plivo_signed(url: str, form: dict[str, str], nonce: str,
                 token: str = PLIVO_AUTH_TOKEN) -> dict[str, str]:
    """Plivo's V3 signature headers, computed by the official SDK."""
    signed: bytes = get_signature_v3(token.encode(), construct_post_url(url, dict(form)),
                                     nonce.encode())
    return {"X-Plivo-Signature-V3": signed.decode(), "X-Plivo-Signature-V3-Nonce": nonce}


def plivo_form(call_id: str) -> dict[str, str]:
    """An answer URL's form for a call."""
    return {"CallUUID": call_id, "From": "15550100", "To": "15550199",
            "CallStatus": "in-progress", "Direction": "inbound", "Event": "StartApp"}


async def plivo_answered(base_url: str, call_id: str, query: str = "") -> dict[str, str]:
    """The stream parameters of the answer XML the signed webhook returns for `call_id`."""
    path = "/v1/telephony/plivo/voice" + (f"?{query}" if query else "")
    form = plivo_form(call_id)
    headers = plivo_signed(base_url.rstrip("/") + path, form, uuid.uuid4().hex)
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as http:
        answer = await http.post(path, data=form, headers=headers)
    assert answer.status_code == 200, answer.text
    found = _EXTRA.search(answer.text)
    assert found is not None, answer.text
    params = unpack_extra_headers(unescape(found.group(1)))
    assert params is not None
    return params


async def opened(nats_url: str, prefix: str, user: str, *, connected: bool = False) -> list[str]:
    """Session ids the durable record opened for `user` (with `connected`: only those whose
    call is recorded as connected)."""
    nc = await bus_connect(BusSettings(nats_url=nats_url, prefix=prefix), name="carriers-test")
    try:
        replayed = await read_subject(
            nc.jetstream(), Topology(prefix).stream_name(Context.INTERACTION),
            f"{prefix}.interaction.>", INTERACTION,
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
