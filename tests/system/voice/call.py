"""A phone call to a running holdline over a carrier's protocol: seed 002's conversation.

With `make run` up, `.venv/bin/python -m tests.system.voice.call` dials the surface as Twilio
would (`--carrier telnyx` or `--carrier plivo`: as that carrier would, on its own stream
route; `--carrier vonage` or `exotel`: the shorter call of `tests.system.carriers.call`),
with real espeak-ng speech in μ-law, real-time pace, marks returned as a phone
plays the audio, and holds the conversation the voice seed is about:

1. the caller asks for two accesses; the system of record is slow (the demo's latency
   fault), so the work outlives the turn;
2. the agent accepts at once, and the caller cuts in while the acceptance plays: `clear`,
   the history keeps only the words that were heard, the operations keep running;
3. the caller keeps talking while the accesses complete: the closing waits for quiet;
4. the caller hears exactly one closing, and hangs up.

It then checks what the caller heard against the durable record and the provider's ledger,
prints a transcript and the checks, and exits 1 when one fails.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from testkit.dialects import PLIVO, TELNYX, TWILIO, Dialect
from testkit.phone import Phone, speech
from testkit.surface import Chat, eventually, open_chat
from tests.system.carriers.call import OTHER_CARRIERS
from tests.system.carriers.call import call as carrier_call

REQUEST = "give me access to notion and gitlab"
RESOURCES = ("notion", "gitlab")
# The provider takes this long per access, so the results land while the caller talks.
PROVIDER_LATENCY_MS = 2500
DIALECTS: dict[str, Dialect] = {"twilio": TWILIO, "telnyx": TELNYX, "plivo": PLIVO}


@dataclass
class CallReport:
    """What the call heard and what the record says."""

    session_id: str
    transcript: list[str] = field(default_factory=list)
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check held."""
        return all(self.checks.values())

    def render(self) -> str:
        """The transcript, then one line per check."""
        lines = [f"session {self.session_id}", *self.transcript, ""]
        lines += [f"[{'ok' if held else 'FAILED'}] {name}" for name, held in self.checks.items()]
        return "\n".join(lines)


async def _spoken_closing(chat: Chat) -> dict[str, Any] | None:
    for delivery in (await chat.snapshot())["deliveries"]:
        if delivery["status"] == "spoken" and delivery.get("kind", "final") == "final":
            found: dict[str, Any] = delivery
            return found
    return None


async def seed_conversation(
    surface_url: str, provider_url: str, dialect: Dialect = TWILIO
) -> CallReport:
    """Hold the conversation against a running system; return what happened."""
    async with httpx.AsyncClient(base_url=surface_url, timeout=10) as client:
        chat = await open_chat(client, user=f"caller-{uuid.uuid4().hex[:6]}")
        report = CallReport(chat.session_id)
        for name in RESOURCES:
            response = await client.post(
                "/v1/demo/faults",
                json={"match": name, "latency_ms": PROVIDER_LATENCY_MS, "times": 1},
            )
            response.raise_for_status()
        phone = Phone(surface_url, {"session_id": chat.session_id, "token": chat.token},
                      dialect=dialect)
        await phone.dial()
        try:
            await phone.talk(await speech(REQUEST))
            # The caller cuts in 0.5 s into the acceptance, then keeps talking.
            await phone.wait_playing(500)
            await phone.talk(await speech("wait one moment please"))
            await phone.talk(await speech("i am still here"))
            closing = await eventually(lambda: _spoken_closing(chat), timeout_s=40)
        finally:
            await phone.hang_up()
        await _check(report, chat, phone, closing, provider_url)
    return report


async def _check(
    report: CallReport, chat: Chat, phone: Phone, closing: dict[str, Any], provider_url: str
) -> None:
    events = await chat.timeline()
    snapshot = await chat.snapshot()
    for event in events:
        if event["type"] == "turn.received":
            report.transcript.append(f"caller: {event['data']['text']}")
    for message in snapshot["messages"]:
        if message["role"] == "assistant":
            report.transcript.append(f"agent (heard): {message['text']}")
    types = [event["type"] for event in events]
    report.checks["the caller's cut-in cleared the agent's audio"] = bool(phone.clears)
    report.checks["history keeps only the heard part of the cut reply"] = (
        "reply.truncated" in types
    )
    async with httpx.AsyncClient(base_url=provider_url, timeout=10) as provider:
        entries = (await provider.get("/ledger")).json()["entries"]
    for name in RESOURCES:
        effects = sum(e["effects"] for e in entries if e["resource"] == name)
        report.checks[f"{name}: exactly one effect at the provider"] = effects == 1
    batch = [o for o in snapshot["operations"] if o["batch_id"] == closing["batch_id"]]
    report.checks["the barge-in cancelled no operation: all committed"] = (
        sorted(o["status"] for o in batch) == ["committed"] * len(RESOURCES)
    )
    finals = [d for d in snapshot["deliveries"] if d["batch_id"] == closing["batch_id"]
              and d.get("kind", "final") == "final"]
    report.checks["exactly one final delivery for the batch"] = len(finals) == 1
    said = [m for m in snapshot["messages"] if m["delivery_id"] == closing["delivery_id"]]
    report.checks["the closing is in history once, every word of it"] = (
        len(said) == 1 and closing["text"] in said[0]["text"]
    )
    # Said on its own, a closing the caller cut is recorded unheard (and said again, shorter);
    # riding on a reply, the history keeps it only if its words were heard.
    own = [u for u in phone.utterances if u.mark.startswith(closing["delivery_id"])]
    unheard = [e for e in events if e["type"] == "delivery.unheard"
               and e.get("delivery_id") == closing["delivery_id"]]
    report.checks["every cut of the closing's own audio is recorded unheard"] = (
        len([u for u in own if u.flushed]) <= len(unheard)
    )
    ready = [i for i, e in enumerate(events) if e["type"] == "delivery.ready"
             and e.get("delivery_id") == closing["delivery_id"]]
    committed = [i for i, e in enumerate(events) if e["type"] == "operation.committed"
                 and e.get("batch_id") == closing["batch_id"]]
    report.checks["every access committed before its closing was ready"] = bool(ready) and (
        len(committed) == len(RESOURCES) and max(committed) < ready[0]
    )


def main() -> None:
    """`python -m tests.system.voice.call [--url ...] [--provider ...] [--carrier ...]`."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the surface")
    parser.add_argument("--provider", default="http://127.0.0.1:8090", help="the provider")
    parser.add_argument("--carrier", choices=[*sorted(DIALECTS), *OTHER_CARRIERS],
                        default="twilio", help="the stream protocol the phone speaks")
    args = parser.parse_args()
    if args.carrier in OTHER_CARRIERS:
        checks = asyncio.run(carrier_call(args.url, args.carrier))
        for name, held in checks.items():
            print(f"[{'ok' if held else 'FAILED'}] {name}")
        sys.exit(0 if all(checks.values()) else 1)
    report = asyncio.run(seed_conversation(args.url, args.provider, DIALECTS[args.carrier]))
    print(report.render())
    sys.exit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
