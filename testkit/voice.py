"""Shared probes for the voice tests: deliveries, metrics, the provider's ledger, timelines."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, eventually, fault, running_stack

from .phone import AUTH_TOKEN, Phone, Utterance, speech

VOICE_ENV = {
    "HOLDLINE_MIN_QUIET_MS": "300",
    "HOLDLINE_DELIVERY_WINDOW_MS": "20000",
    "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
    "HOLDLINE_VAD_MIN_SPEECH_MS": "60",
    "HOLDLINE_VAD_ENDPOINT_MS": "400",
}


@contextlib.contextmanager
def voice_stack(
    broker: Broker, logs: Path, *, env: dict[str, str] | None = None,
    second_surface_env: dict[str, str] | None = None,
) -> Iterator[SurfaceStack]:
    """Every service as a process on a prefix of its own, stopped on exit."""
    with running_stack(
        broker.url, logs, "v", env={**VOICE_ENV, **(env or {})},
        second_surface_env=second_surface_env,
    ) as running:
        yield running


def unique(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}{uuid.uuid4().hex[:6]}"


async def metric(client: httpx.AsyncClient, name: str, **labels: str) -> float:
    """One sample of the surface's /metrics (0 when absent)."""
    text = (await client.get("/metrics")).text
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{wanted}}}") or (not labels and line.startswith(f"{name} ")):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def delivery_with(chat: Chat, status: str) -> dict[str, Any] | None:
    """The session's first delivery in `status`, if any."""
    snapshot = await chat.snapshot()
    for delivery in snapshot["deliveries"]:
        if delivery["status"] == status:
            found: dict[str, Any] = delivery
            return found
    return None


async def ledger(stack: SurfaceStack, resource: str) -> int:
    """Effects the provider's ledger records for a resource."""
    async with httpx.AsyncClient(base_url=stack.provider_url) as http:
        entries = (await http.get("/ledger")).json()["entries"]
    return sum(e["effects"] for e in entries if e["resource"] == resource)


async def events_of(chat: Chat, kind: str, **ids: str) -> list[dict[str, Any]]:
    """Timeline events of one type, filtered by envelope ids."""
    return [
        e for e in await chat.timeline()
        if e["type"] == kind and all(e.get(k) == v for k, v in ids.items())
    ]


async def carriers(chat: Chat, delivery_id: str) -> set[str]:
    """Marks that carry a delivery: its own, or the reply it was attached to."""
    marks = {delivery_id}
    for event in await events_of(chat, "turn.replied"):
        if delivery_id in event["data"].get("attached_delivery_ids", []):
            marks.add(event["response_id"])
    return marks


async def heard(phone: Phone, chat: Chat, delivery_id: str) -> Utterance:
    """The utterance that carried the delivery, once the phone played it back cleanly."""

    async def probe() -> Utterance | None:
        marks = await carriers(chat, delivery_id)
        for utterance in phone.utterances:
            if utterance.mark in marks and utterance.returned_at and not utterance.flushed:
                return utterance
        return None

    return await eventually(probe, timeout_s=25)


async def call_in(url: str, chat: Chat, **options: Any) -> Phone:
    """A dialled phone call continuing the chat's session."""
    phone = Phone(url, {"session_id": chat.session_id, "token": chat.token}, **options)
    await phone.dial()
    return phone


# A request the domain LM recognises reliably, and the resources it grants.
SPOKEN_REQUEST = "give me access to notion and gitlab"
SPOKEN_RESOURCES = ("notion", "gitlab")


async def ask_by_voice_with_a_slow_provider(stack: SurfaceStack, phone: Phone) -> None:
    """Say `SPOKEN_REQUEST` (faster than real time: its timing is not the subject) while
    the provider answers 700 ms late, so the closing comes well after the acceptance."""
    for name in SPOKEN_RESOURCES:
        await fault(stack, match=name, latency_ms=700, times=1)
    await phone.talk(await speech(SPOKEN_REQUEST), realtime=False)


async def closing_on_a_dead_line(url: str, chat: Chat, prefix: str) -> tuple[Phone, str, str]:
    """A call whose line never plays (marks never return), and a closing `sent` on it:
    (the phone, the granted resource, the delivery id)."""
    dead = await call_in(url, chat, play=False)
    name = unique(prefix)
    await chat.say(f"give me access to {name}")
    first = await eventually(lambda: delivery_with(chat, "sent"), timeout_s=20)
    await dead.wait_for(first["delivery_id"])
    return dead, name, str(first["delivery_id"])
