"""A phone call to a running holdline over Vonage's or Exotel's protocol.

With `make run` up, `.venv/bin/python -m tests.system.voice.call --carrier vonage` (or
`exotel`) runs `call`, which does what the carrier does when a call comes in: asks the
answer webhook (Vonage's NCCO) or the Voicebot applet's URL (Exotel's stream URL), connects
the stream, says a request in real espeak-ng speech, cuts into the acceptance, and waits
for the one closing to be heard; `voice/call.py` prints the checks and exits 1 when one
fails. Signed requests are made with the test secrets of `testkit.carrier_phones`; a
surface without them serves loopback anyway.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from testkit.carrier_phones import ExotelPhone, VonagePhone, exotel_answered, vonage_answered
from testkit.phone import Phone, speech
from testkit.surface import eventually, open_chat
from testkit.voice import SPOKEN_REQUEST, delivery_with

# The carriers this call speaks (the others are `testkit.dialects`' and `voice/call.py`'s).
OTHER_CARRIERS = ("vonage", "exotel")


async def call(url: str, carrier: str) -> dict[str, bool]:
    """One call; the checks that held or failed."""
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        chat = await open_chat(client, user=f"caller-{uuid.uuid4().hex[:6]}")
        query = f"session_id={chat.session_id}&token={chat.token}"
        phone: Phone
        if carrier == "vonage":
            endpoint = await vonage_answered(url, str(uuid.uuid4()), query)
            phone = VonagePhone(url, endpoint["headers"])
        else:
            call_sid = uuid.uuid4().hex
            phone = ExotelPhone(url, await exotel_answered(url, call_sid, query),
                                call_sid=call_sid)
        await phone.dial()
        try:
            await phone.talk(await speech(SPOKEN_REQUEST))
            await phone.wait_playing(500)
            await phone.talk(await speech("wait one moment please"))
            closing: dict[str, Any] = await eventually(
                lambda: delivery_with(chat, "spoken"), timeout_s=40
            )
        finally:
            await phone.hang_up()
        events = [e["type"] for e in await chat.timeline()]
        snapshot = await chat.snapshot()
    said = [m["text"] for m in snapshot["messages"] if m["role"] == "assistant"]
    print("\n".join(f"agent (heard): {text}" for text in said))
    return {
        "the cut-in stopped the acceptance": "control.barge_in" in events,
        "history keeps only the heard part": "reply.truncated" in events,
        "one closing, heard": len([d for d in snapshot["deliveries"]
                                   if d["batch_id"] == closing["batch_id"]]) == 1,
    }
