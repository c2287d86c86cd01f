"""What every scenario asserts, read from the system's public edges and its streams.

- durable state: the session's events as the streams hold them (`libs.bus.read_subject`);
- side effects: the sandbox provider's ledger;
- final deliveries: `delivery.ready` of kind `final` per batch, and how often one was said;
- causal order: the surface's timeline;
- what the user saw or heard: the snapshot's history and the phone's marks (`heard_once`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

from libs.bus import EVENT_CODECS, Context, Received, Topology, connect, read_subject
from libs.config import BusSettings
from testkit.drained import settled
from testkit.phone import Phone
from testkit.surface import COMMON_ENV, Chat, SurfaceStack, effects, eventually

# How long a closing's batch is watched for anything late once the closing was said: longer
# than the ack wait of the stacks (testkit/surface.py; unset, the production default is the
# same 2 s), after which an unacknowledged message is redelivered, so a redelivery of
# anything delivered before the closing has shown; a duplicate provider callback (sent
# again after 0.1 s) too.
QUIET_S = float(COMMON_ENV["HOLDLINE_ACK_WAIT_S"]) + 0.5

_TERMINAL = {
    "operation.committed": "committed",
    "operation.failed_final": "failed_final",
    "operation.cancelled": "cancelled",
    "operation.rejected": "rejected",
}
_SAID = ("delivery.delivered", "delivery.spoken")


def ids(answer: dict[str, Any]) -> tuple[str, list[str]]:
    """The batch id and operation ids a turn admitted (one batch, at least one operation)."""
    ops = answer["operations"]
    assert ops, answer
    assert len({o["batch_id"] for o in ops}) == 1
    return ops[0]["batch_id"], [o["operation_id"] for o in ops]


def tag(item: Received[Any]) -> str:
    """The event type of a stored message."""
    return str(item.envelope.event.__struct_config__.tag)


@dataclass
class Durable:
    """One session's events as the streams hold them, per context, in stream order."""

    events: dict[Context, list[Received[Any]]]

    def kinds(self, context: Context, **ids: str) -> list[str]:
        """Event types of a context, optionally only those carrying the given ids."""
        return [
            tag(item)
            for item in self.events[context]
            if all(getattr(item.envelope, k) == v for k, v in ids.items())
        ]

    def status(self, operation_id: str) -> str | None:
        """The terminal status the operation's own subject records (None: not terminal)."""
        ends = [k for k in self.kinds(Context.OPERATIONS, operation_id=operation_id)
                if k in _TERMINAL]
        assert len(ends) <= 1, f"{operation_id} ended twice: {ends}"
        return _TERMINAL[ends[0]] if ends else None

    def finals(self, batch_id: str) -> list[str]:
        """Delivery ids of the batch's final deliveries (`delivery.ready`, kind final)."""
        return [
            str(item.envelope.delivery_id)
            for item in self.events[Context.DELIVERIES]
            if tag(item) == "delivery.ready"
            and item.envelope.batch_id == batch_id
            and item.envelope.event.kind == "final"
        ]

    def said(self, delivery_id: str) -> list[str]:
        """How the delivery was recorded as said (delivered or spoken), once per record."""
        return [k for k in self.kinds(Context.DELIVERIES, delivery_id=delivery_id) if k in _SAID]


async def durable(stack: SurfaceStack, session_id: str) -> Durable:
    """Read every stream's slice of one session straight from JetStream."""
    topology = Topology(stack.prefix)
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="checks")
    try:
        js = nc.jetstream()
        events: dict[Context, list[Received[Any]]] = {}
        for context, codec in EVENT_CODECS.items():
            read = await read_subject(
                js,
                topology.stream_name(context),
                topology.session_filter(context, session_id),
                codec,
            )
            assert not read.rejected, f"undecodable events in {context}: {read.rejected}"
            events[context] = read.items
        return Durable(events)
    finally:
        await nc.close()


def in_order(kinds: list[str], *expected: str) -> None:
    """The expected event types appear in this causal order (first occurrence of each)."""
    missing = [k for k in expected if k not in kinds]
    assert not missing, f"missing {missing} in {kinds}"
    at = [kinds.index(k) for k in expected]
    assert at == sorted(at), f"expected order {expected}, got {kinds}"


async def timeline(chat: Chat, **ids: str) -> list[dict[str, Any]]:
    """The surface's timeline (causal order), optionally only events carrying the given ids."""
    return [e for e in await chat.timeline() if all(e.get(k) == v for k, v in ids.items())]


async def final_said(chat: Chat, batch_id: str, status: str = "delivered") -> dict[str, Any]:
    """Wait until the batch's final delivery reached `status`; return it."""

    async def probe() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        for delivery in snap["deliveries"]:
            if (delivery["batch_id"], delivery["kind"], delivery["status"]) == (
                batch_id, "final", status,
            ):
                found: dict[str, Any] = delivery
                return found
        return None

    return await eventually(probe, timeout_s=30)


async def held_back(chat: Chat, batch_id: str) -> dict[str, Any]:
    """Wait until the batch's closing is held back by the gate (status waiting)."""

    async def probe() -> dict[str, Any] | None:
        snap = await chat.snapshot()
        found = [d for d in snap["deliveries"] if d["batch_id"] == batch_id]
        return snap if found and found[0]["status"] == "waiting" else None

    return await eventually(probe)


async def closed_once(
    stack: SurfaceStack,
    chat: Chat,
    batch_id: str,
    statuses: dict[str, str],
    *,
    said_as: str = "delivered",
    quiet_s: float = QUIET_S,
) -> tuple[Durable, dict[str, Any]]:
    """The batch ended in exactly one closing, said once, after every member's end.

    `statuses` maps operation ids of the batch to the terminal status the streams must hold.
    Returns the durable record and the closing message the user saw.
    """
    delivery = await final_said(chat, batch_id, said_as)
    # Anything late (a duplicate callback, a redelivery) has had its chance to show, and
    # what it led to has been handled: the window, then a bus every service has drained.
    await asyncio.sleep(quiet_s)
    await settled(stack)
    record = await durable(stack, chat.session_id)
    assert {op: record.status(op) for op in statuses} == statuses
    assert record.finals(batch_id) == [delivery["delivery_id"]], "not one final delivery"
    assert record.said(delivery["delivery_id"]) == [f"delivery.{said_as}"]
    assert record.kinds(Context.BATCHES, batch_id=batch_id).count("batch.drained") == 1
    snap = await chat.snapshot()
    events = await chat.timeline()
    kinds = [e["type"] for e in events]
    # A reply can carry several pending closings; its message names only one of them.
    carriers = {
        e["turn_id"] for e in events
        if e["type"] == "turn.replied"
        and delivery["delivery_id"] in (e.get("data") or {}).get("attached_delivery_ids", ())
    }
    messages = [
        m for m in snap["messages"]
        if m["delivery_id"] == delivery["delivery_id"]
        or (m["role"] == "assistant" and m["delivery_id"] and m["turn_id"] in carriers)
    ]
    assert len(messages) == 1, f"the closing was shown {len(messages)} times: {snap}"
    # Causal order: every member ended before the closing was said.
    said_at = next(
        i for i, e in enumerate(events)
        if e["type"] == f"delivery.{said_as}" and e.get("delivery_id") == delivery["delivery_id"]
    )
    for op in statuses:
        ended = [i for i, e in enumerate(events)
                 if e.get("operation_id") == op and e["type"] in _TERMINAL]
        assert ended, f"{op} never ended: {kinds}"
        assert ended[0] < said_at, f"{op} ended after its closing: {kinds}"
    diagnosis = (await chat.client.get(
        f"/v1/sessions/{chat.session_id}/timeline", headers=chat.auth
    )).json()["diagnosis"]
    assert not [c for c in diagnosis["unconfirmed_closings"] if c["said_before_terminal"]]
    return record, messages[0]


async def effects_of(stack: SurfaceStack, *resources: str) -> dict[str, int]:
    """Real effects the provider's ledger counts, per resource."""
    return {r: await effects(stack, r) for r in resources}


async def ledger(stack: SurfaceStack) -> list[dict[str, Any]]:
    """The provider's ledger entries (key, kind, resource, effects)."""
    async with httpx.AsyncClient(base_url=stack.provider_url) as http:
        entries: list[dict[str, Any]] = (await http.get("/ledger")).json()["entries"]
    return entries


def marks_of(events: list[dict[str, Any]], delivery_id: str) -> list[str]:
    """The Twilio marks that carried a delivery, in order: its own playbacks, or the reply
    of the turn it rode on."""
    marks = [
        str(e["playback_id"]) for e in events
        if e["type"] == "playback.started" and e.get("delivery_id") == delivery_id
    ]
    marks += [
        str(e["response_id"]) for e in events
        if e["type"] == "turn.replied"
        and delivery_id in (e.get("data") or {}).get("attached_delivery_ids", ())
    ]
    assert marks, f"{delivery_id} was never played"
    return marks


def event_of(record: Durable, context: Context, kind: str, **ids: str) -> Any:
    """The body of the first stored event of a type carrying the given ids."""
    for item in record.events[context]:
        if tag(item) == kind and all(getattr(item.envelope, k) == v for k, v in ids.items()):
            return item.envelope.event
    raise AssertionError(f"no {kind} with {ids}")


async def callbacks_delivered(stack: SurfaceStack) -> float:
    """Completion callbacks the provider has delivered so far."""
    async with httpx.AsyncClient(base_url=stack.provider_url) as http:
        text = (await http.get("/metrics")).text
    for line in text.splitlines():
        if line.startswith('holdline_sandbox_callbacks_total{outcome="delivered"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def voice_batch(chat: Chat, resource: str) -> tuple[str, str]:
    """The batch and operation a spoken request for `resource` admitted."""

    async def admitted() -> tuple[str, str] | None:
        for op in (await chat.snapshot())["operations"]:
            if op["label"] == resource:
                return op["batch_id"], op["operation_id"]
        return None

    return await eventually(admitted, timeout_s=20)


async def heard_once(phone: Phone, chat: Chat, delivery_id: str) -> None:
    """The caller heard the delivery: its last playback's mark came back with no clear."""
    marks = marks_of(await timeline(chat), delivery_id)
    await phone.wait_for(marks[-1])
    # A retry reuses its mark name: the last utterance under it is the one that counted.
    heard = [u for u in phone.utterances if u.mark == marks[-1]][-1]
    assert heard.returned_at is not None
    assert not heard.flushed
