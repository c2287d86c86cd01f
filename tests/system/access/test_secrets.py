"""Secrets never reach logs or events; the user's words never reach logs.

Policy: the session token, tenant API keys, `TWILIO_AUTH_TOKEN` and the provider callback
secret appear in no process log and no stored event (only the token's hash is stored).
What the user typed (here an email address and a card-like number) appears in no log, and
among events only in the session's own interaction subject, where the conversation is
recorded (and from which `DELETE /v1/sessions/{id}` purges it).
"""

from __future__ import annotations

import httpx

from libs.bus import Topology
from testkit.surface import SurfaceStack, effects, eventually, frames_until, unique

from .stored import stored_messages
from .tenants import API_KEYS, SECRETS, call_text, open_session, ws_status


async def test_secrets_and_user_words_stay_out_of_logs_and_foreign_events(
    client: httpx.AsyncClient, stack: SurfaceStack
) -> None:
    chat = await open_session(client, "scan")
    email = f"ana.{unique('x')}@example.com"
    card = "4111 1111 1111 1111"
    resource = unique("wiki")
    ws = await chat.stream()
    await chat.say(f"my card is {card} and my mail is {email}")
    await chat.say(call_text("provision_access", {"accesses": [email]}))
    await chat.say(
        call_text("book_table", {"restaurant": card, "date": "2030-01-01", "time": "20:00",
                             "party_size": 2})
    )
    await chat.say(
        call_text("transfer_money", {"from_account": "main", "to_account": email, "amount": 12})
    )
    await chat.say(f"give me access to {resource}")
    await frames_until(ws, lambda f: f["type"] == "message" and f["message"]["delivery_id"])
    await ws.close()
    # Wrong credentials of every kind, so the refusal paths are in the logs too.
    assert await ws_status(chat.stream_url().replace(chat.token, chat.token[::-1])) == 404
    refused = await client.post(
        "/v1/sessions", json={"user_id": "x", "tenant_id": "scan"},
        headers={"X-Api-Key": API_KEYS["scan"][::-1]},
    )
    assert refused.status_code == 401
    forged = await client.post(
        "/v1/telephony/twilio/voice", data={"CallSid": "CA1", "From": email},
        headers={"X-Twilio-Signature": "forged"},
    )
    assert forged.status_code == 403

    async def committed() -> bool:
        return await effects(stack, resource) == 1

    await eventually(committed, timeout_s=20)
    secrets = {"session token": chat.token, "api key": API_KEYS["scan"], **SECRETS}
    words = {"email": email, "card": card, "card digits": card.replace(" ", "")}
    stored = await stored_messages(stack.nats_url, stack.prefix)
    assert stored
    own_subject = Topology(stack.prefix).session_subject(chat.session_id)
    for name, needle in secrets.items():
        leaks = [(m.stream, m.seq) for m in stored if needle.encode() in m.data]
        assert not leaks, f"{name} stored in events {leaks}"
    for name, needle in words.items():
        elsewhere = [
            (m.stream, m.subject) for m in stored
            if needle.encode() in m.data and m.subject != own_subject
        ]
        assert not elsewhere, f"the user's {name} stored outside the conversation: {elsewhere}"
    assert any(email.encode() in m.data for m in stored if m.subject == own_subject)
    logs = sorted(stack.logs.glob("*.log"))
    assert {p.stem for p in logs} >= set(stack.procs)
    for path in logs:
        text = path.read_text(errors="replace")
        assert text.strip(), path
        for name, needle in {**secrets, **words}.items():
            assert needle not in text, f"{name} in {path.name}"
