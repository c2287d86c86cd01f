"""Every measure of DESIGN §9 is exported from start-up and moves with a scripted conversation.

The whole system runs as processes. Every runtime service is scraped right after start-up
(no traffic yet) and again after five conversations run side by side over HTTP:

- a batch of three accesses with one injected 503 (a retry), then a status question;
- a booking held by provider latency, then "cancel the booking";
- an access held by latency, handed off to another agent while pending;
- a transfer that needs confirmation, then "yes";
- an access whose result waits while the user types, then rides on the next message.

Each relevant measure must have moved by what the conversation implies, and no label value
anywhere may be a session or user id.
"""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from collections.abc import Iterable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from testkit.drained import settled
from testkit.surface import (
    Chat,
    SurfaceStack,
    closings,
    effects,
    eventually,
    fault,
    open_chat,
    unique,
)

from .observed import RUNTIME_SERVICES, ObservedStack, scrape

# DESIGN §9, measure by measure, as exported families (counters without `_total`).
SECTION_9: dict[str, str] = {
    "request → acceptance": "holdline_acceptance_seconds",
    "first voiced frame → clear": "holdline_barge_in_seconds",
    "delivery ready → sent": "holdline_delivery_ready_to_sent_seconds",
    "speech stop → acceptance audio": "holdline_speech_stop_to_acceptance_audio_seconds",
    "operation accept → start": "holdline_operation_accept_to_start_seconds",
    "operation duration": "holdline_operation_duration_seconds",
    "complete → delivery ready": "holdline_operation_complete_to_delivery_ready_seconds",
    "delivery ready → first audio": "holdline_delivery_ready_to_first_audio_seconds",
    "generated → played gap": "holdline_generated_to_played_gap_seconds",
    "duplicate side effects": "holdline_duplicate_side_effects",
    "duplicate deliveries": "holdline_duplicate_deliveries",
    "stale deliveries": "holdline_stale_deliveries",
    # The share is next_turn_resyncs / deliveries (a dashboard ratio).
    "next-turn resyncs": "holdline_next_turn_resyncs",
    "deliveries (the share's denominator)": "holdline_deliveries",
    "cancelled-unheard audio": "holdline_cancelled_unheard_audio_seconds",
    "retries": "holdline_operation_retries",
    "timeouts": "holdline_operation_timeouts",
    "UNKNOWN count": "holdline_operation_unknown",
    "cancellations requested": "holdline_cancellations_requested",
    "cancellations confirmed": "holdline_cancellations_confirmed",
    "compensations": "holdline_compensations",
    "handoffs with pending operations": "holdline_handoffs_with_pending_operations",
}
HISTOGRAM_SUFFIXES = ("_bucket", "_count", "_sum", "_created")
COUNTER_SUFFIXES = ("_total", "_created")

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """Families (name → type) and samples ((name, sorted labels) → value) of one scrape."""
    families: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return families, samples


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


class Scrape:
    """Every runtime service's samples, summed across services."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.per_service = {name: parse(text) for name, text in texts.items()}

    def value(self, name: str, **labels: str) -> float:
        return sum(total(samples, name, **labels) for _, samples in self.per_service.values())


def delta(before: Scrape, after: Scrape, name: str, **labels: str) -> float:
    return after.value(name, **labels) - before.value(name, **labels)


def _scrape_all(stack: SurfaceStack) -> Scrape:
    return Scrape({name: scrape(stack, name) for name in RUNTIME_SERVICES})


def test_every_section_9_family_is_exposed_from_start_up(observed: ObservedStack) -> None:
    for service, text in observed.at_start.items():
        families, samples = parse(text)
        missing = {m: n for m, n in SECTION_9.items() if n not in families}
        assert not missing, f"{service} does not export {missing}"
        for name in SECTION_9.values():
            kind = families[name]
            assert kind in {"histogram", "counter"}, (name, kind)
            if not name.endswith("_seconds"):
                assert kind == "counter", name
            label_less = any(n.startswith(name) and not ls for (n, ls) in samples)
            has_labels = any(n.startswith(name) and ls for (n, ls) in samples)
            if not has_labels and label_less:
                # A label-less family shows its zero before the first observation.
                zero = f"{name}_count" if kind == "histogram" else f"{name}_total"
                assert samples[(zero, ())] == 0.0, (service, name)
        # The label-less ones must not be waiting for their first use.
        for name in (
            "holdline_acceptance_seconds",
            "holdline_barge_in_seconds",
            "holdline_delivery_ready_to_sent_seconds",
            "holdline_speech_stop_to_acceptance_audio_seconds",
            "holdline_operation_complete_to_delivery_ready_seconds",
            "holdline_delivery_ready_to_first_audio_seconds",
            "holdline_generated_to_played_gap_seconds",
            "holdline_cancelled_unheard_audio_seconds",
        ):
            assert (f"{name}_count", ()) in samples, (service, name)
        for name in (
            "holdline_duplicate_side_effects",
            "holdline_duplicate_deliveries",
            "holdline_stale_deliveries",
            "holdline_next_turn_resyncs",
            "holdline_handoffs_with_pending_operations",
        ):
            assert (f"{name}_total", ()) in samples, (service, name)


async def _batch_with_a_retry(chat: Chat, stack: SurfaceStack) -> list[str]:
    names = [unique("gitlab"), unique("jira"), unique("notion")]
    await fault(stack, match=names[0], status=503, times=1)
    answer = await chat.say(f"give me access to {names[0]}, {names[1]} and {names[2]}")
    batch = answer["operations"][0]["batch_id"]
    await _closed(chat, batch)
    await chat.say("how is it going?")
    return names


async def _cancel_a_booking(chat: Chat, stack: SurfaceStack) -> dict[str, Any]:
    await fault(stack, match="casa-*", latency_ms=1500, times=1)
    answer = await chat.say("book a table at Casa Pepe tomorrow at 21:00")
    [op] = answer["operations"]
    assert op["tool"] == "book_table"

    async def running() -> bool:
        snap = await chat.snapshot()
        return any(o["status"] == "running" for o in snap["operations"])

    await eventually(running)
    await chat.say("cancel the booking")

    async def ended() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        found = next(o for o in snap["operations"] if o["operation_id"] == op["operation_id"])
        return found if found["status"] in {"cancelled", "committed"} else None

    found = await eventually(ended, timeout_s=20)

    async def settled() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        finals = [d for d in snap["deliveries"] if d["kind"] == "final"]
        return finals[0] if finals and finals[0]["status"] in {"delivered", "suppressed"} else None

    closing = await eventually(settled, timeout_s=20)
    return {**found, "closing": closing}


async def _handoff_while_pending(chat: Chat, stack: SurfaceStack) -> None:
    name = unique("hubspot")
    await fault(stack, match=name, latency_ms=800, times=1)
    answer = await chat.say(f"give me access to {name}")
    handed = await chat.handoff("support")
    assert handed["pending_operations"] == [answer["operations"][0]["operation_id"]]
    await _closed(chat, answer["operations"][0]["batch_id"])


async def _confirmed_transfer(chat: Chat) -> None:
    asked = await chat.say("send 50 euros to bob-main")
    [op] = asked["operations"]
    assert (op["tool"], op["status"]) == ("transfer_money", "awaiting_confirmation")
    await chat.say("yes")
    await _closed(chat, op["batch_id"])


async def _next_turn(chat: Chat, stack: SurfaceStack) -> None:
    name = unique("figma")
    await fault(stack, match=name, latency_ms=300, times=1)
    answer = await chat.say(f"give me access to {name}")
    await chat.typing(True)

    async def pinned() -> bool:
        snap = await chat.snapshot()
        found = [d for d in snap["deliveries"] if d["kind"] == "final"]
        return bool(found) and (found[0]["reason"] or "").startswith("window_expired")

    await eventually(pinned)
    await chat.say("and how is it going?")
    snap = await chat.snapshot()
    assert closings(snap, answer["operations"][0]["batch_id"])


async def _closed(chat: Chat, batch: str) -> None:
    async def said() -> bool:
        snap = await chat.snapshot()
        finals = [
            d for d in snap["deliveries"] if d["batch_id"] == batch and d["kind"] == "final"
        ]
        return bool(finals) and finals[0]["status"] == "delivered"

    await eventually(said, timeout_s=20)


def _label_values(scrape: Scrape) -> Iterable[tuple[str, str, str]]:
    for service, (_, samples) in scrape.per_service.items():
        for name, labels in samples:
            for _, value in labels:
                yield service, name, value


async def test_a_scripted_conversation_moves_every_relevant_measure(
    observed: ObservedStack,
) -> None:
    stack = observed.stack
    before = _scrape_all(stack)
    async with httpx.AsyncClient(base_url=stack.url, timeout=15.0) as client:
        users = [f"user-{uuid.uuid4().hex[:12]}" for _ in range(5)]
        chats = [
            await open_chat(client, user=user, agent="sales" if i == 2 else None)
            for i, user in enumerate(users)
        ]
        names, booking, *_ = await asyncio.gather(
            _batch_with_a_retry(chats[0], stack),
            _cancel_a_booking(chats[1], stack),
            _handoff_while_pending(chats[2], stack),
            _confirmed_transfer(chats[3]),
            _next_turn(chats[4], stack),
        )
    # Every service observes a measure in the handler of the message that moved it, before
    # acknowledging it: once the bus has drained, every measure has moved.
    await settled(stack)
    after = _scrape_all(stack)
    turns = 2 + 2 + 1 + 2 + 2

    def moved(name: str, **labels: str) -> float:
        return delta(before, after, name, **labels)

    # Conversation latency.
    assert moved("holdline_acceptance_seconds_count") == turns
    assert moved("holdline_acceptance_seconds_sum") > 0
    # Operations: every admitted one started and ended, per tool.
    assert moved("holdline_operations_admitted_total", tool="provision_access") == 5
    assert moved("holdline_operations_admitted_total", tool="book_table") == 1
    assert moved("holdline_operations_admitted_total", tool="transfer_money") == 1
    for tool in ("provision_access", "book_table", "transfer_money"):
        assert moved("holdline_operation_accept_to_start_seconds_count", tool=tool) >= 1, tool
    assert moved("holdline_operation_accept_to_start_seconds_count", tool="provision_access") == 5
    assert (
        moved("holdline_operation_duration_seconds_count", tool="provision_access",
              status="committed") == 5
    )
    assert (
        moved("holdline_operation_duration_seconds_count", tool="transfer_money",
              status="committed") == 1
    )
    assert moved("holdline_operation_duration_seconds_count", tool="book_table") == 1
    assert moved("holdline_operations_terminal_total") == 7
    # The injected 503: one retry, and still one effect.
    assert moved("holdline_operation_retries_total", tool="provision_access") >= 1
    assert await effects(stack, names[0]) == 1
    # Cancellation requested, and confirmed only if the provider did cancel.
    assert moved("holdline_cancellations_requested_total", tool="book_table") == 1
    confirmed = moved("holdline_cancellations_confirmed_total", tool="book_table")
    assert confirmed == (1 if booking["status"] == "cancelled" else 0)
    assert moved("holdline_handoffs_with_pending_operations_total") == 1
    # Deliveries: one closing per batch, proactive ones and the one that rode on a reply.
    batches = 5
    assert moved("holdline_operation_complete_to_delivery_ready_seconds_count") == batches
    assert moved("holdline_delivery_ready_to_decision_seconds_count") >= batches
    modes = {
        mode: moved("holdline_deliveries_total", mode=mode, channel="chat")
        for mode in ("proactive", "interrupt", "next_turn")
    }
    # Three idle chats hear theirs at once, the urgent transfer cuts in, the typist's waits.
    assert modes == {"proactive": 3, "interrupt": 1, "next_turn": 1}
    assert moved("holdline_deliveries_total") == batches
    assert (
        moved("holdline_delivery_ready_to_sent_seconds_count")
        == modes["proactive"] + modes["interrupt"]
    )
    assert moved("holdline_next_turn_resyncs_total") >= 1
    # Nothing was duplicated.
    assert moved("holdline_duplicate_deliveries_total") == 0
    assert moved("holdline_duplicate_side_effects_total") == 0
    # Appends per stream, and every consumer reports its backlog.
    for stream in ("interaction", "operations", "deliveries"):
        assert moved("holdline_events_published_total", stream=stream) > 0, stream
    for service in RUNTIME_SERVICES:
        families, samples = after.per_service[service]
        assert "holdline_consumer_pending" in families, service
        # A declared family with no sample would pass the line above: each service must
        # report a value for at least one of its consumers.
        reported = [k for k in samples if k[0] == "holdline_consumer_pending"]
        assert reported, service

    # Bounded labels: no value is a session or user id, or looks like one.
    ids = set(users) | {c.session_id for c in chats}
    for service, name, value in _label_values(after):
        assert value not in ids, (service, name, value)
        assert not re.fullmatch(r"(?:user|u|s|sess)-[0-9a-f]{6,}", value), (service, name, value)
        assert not any(i in value for i in ids), (service, name, value)
    for _, samples in after.per_service.values():
        assert all(not math.isnan(v) for v in samples.values())
