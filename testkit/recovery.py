"""Kill one process mid-batch and time the batch's closing (tests/system/scenarios, bench.recovery).

The system runs with the production timings (ack wait, worker lease, heartbeats: nothing
shortened), two workers, and a provider that holds each effect `latency_ms`. A turn admits a
batch of two accesses; while the provider holds them one process is killed with SIGKILL and,
unless another copy of it carries on (the second worker), started again at once, as a
supervisor would. What is measured is the time from the kill to the closing's delivery.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from testkit.processes import Broker
from testkit.surface import Chat, SurfaceStack, open_chat, unique

# Every kind of process the system runs, by the stack's process name (the broker apart).
KINDS = {
    "broker": "",
    "worker": "operation_worker",
    "coordinator": "batch_coordinator",
    "policy": "delivery_policy",
    "surface": "interaction_surface",
    "provider": "sandbox_provider",
}
# The tests' shortened timings are undone: recovery must come from the defaults.
PRODUCTION_TIMINGS = {"HOLDLINE_ACK_WAIT_S": "", "HOLDLINE_LOG_LEVEL": "INFO"}
WORKERS = {"w1": "operation_worker", "w2": "operation_worker_2"}


def recovery_stack(broker: Broker, logs: Path) -> SurfaceStack:
    """Every service (two workers) on its own prefix of `broker`, not started."""
    return SurfaceStack(
        nats_url=broker.url,
        prefix=f"rc{uuid.uuid4().hex[:10]}",
        logs=logs,
        # Only the worker reads its id; the second worker's own env names it w2.
        env={**PRODUCTION_TIMINGS, "HOLDLINE_WORKER_ID": "w1"},
        extra={"operation_worker_2": ("operation_worker", {"HOLDLINE_WORKER_ID": "w2"})},
    )


@dataclass(frozen=True)
class Trial:
    """One kill: what was killed, the batch and its resources, and the timings."""

    kind: str
    chat: Chat
    batch_id: str
    resources: tuple[str, ...]
    kill_to_closing_s: float
    latency_s: float

    @property
    def beyond_latency_s(self) -> float:
        """What the provider's latency alone does not explain."""
        return self.kill_to_closing_s - self.latency_s


async def _fault(provider_url: str, **body: Any) -> None:
    async with httpx.AsyncClient(base_url=provider_url, timeout=10) as http:
        response = await http.post("/admin/faults", json=body)
        assert response.status_code == 201, response.text


async def _started(chat: Chat, count: int) -> list[str]:
    """Workers of the started attempts, once `count` attempts have started."""
    events = await timeline(chat)
    workers = [str(e["data"].get("worker_id")) for e in events or []
               if e["type"] == "operation.started"]
    return workers if len(workers) >= count else []


def delivered_finals(events: list[dict[str, Any]], batch: str) -> list[dict[str, Any]]:
    """`delivery.delivered` timeline items of the batch's final deliveries."""
    finals = {
        e.get("delivery_id")
        for e in events
        if e["type"] == "delivery.ready"
        and e.get("batch_id") == batch
        and e["data"].get("kind") == "final"
    }
    return [e for e in events if e["type"] == "delivery.delivered"
            and e.get("delivery_id") in finals]


async def timeline(chat: Chat) -> list[dict[str, Any]] | None:
    """The session's timeline, or None while the surface cannot answer."""
    try:
        response = await chat.client.get(
            f"/v1/sessions/{chat.session_id}/timeline", headers=chat.auth
        )
    except httpx.TransportError:
        return None  # the surface is restarting
    if response.status_code != 200:
        return None
    events: list[dict[str, Any]] = response.json()["events"]
    return events


async def _closed_at(chat: Chat, batch: str, timeout_s: float) -> datetime:
    """When the batch's closing was delivered (the event's own time), waiting for it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        events = await timeline(chat)
        said = delivered_finals(events or [], batch)
        if said:
            return datetime.fromisoformat(said[0]["occurred_at"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"batch {batch} did not close within {timeout_s} s")


def _kill_and_restart(stack: SurfaceStack, broker: Broker, kind: str, worker: str) -> None:
    if kind == "broker":
        broker.kill9()
        broker.start()
        return
    # The worker that holds the batch's first operation; the other one carries on alone.
    proc = stack.procs[WORKERS.get(worker, "operation_worker") if kind == "worker" else KINDS[kind]]
    proc.kill9()
    if kind != "worker":
        # Any other process is restarted at once, as a supervisor does.
        proc.start(wait_ready=False)


async def kill_mid_batch(
    stack: SurfaceStack, broker: Broker, client: httpx.AsyncClient, kind: str,
    *, latency_ms: int = 1500, timeout_s: float = 60.0,
) -> Trial:
    """One trial: a batch of two held effects, `kind` killed while the provider holds them."""
    chat = await open_chat(client)
    names = (unique("rec"), unique("rec"))
    for name in names:
        await _fault(stack.provider_url, match=name, latency_ms=latency_ms, times=1)
    response = await client.post(
        f"/v1/sessions/{chat.session_id}/turns",
        json={"text": "give me access to " + " and ".join(names),
              "client_turn_id": f"ct-{uuid.uuid4().hex[:12]}"},
        headers=chat.auth,
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    batch = str(answer["operations"][0]["batch_id"])
    # Mid-batch: both effects are at the provider (their attempts started).
    deadline = time.monotonic() + latency_ms / 1000
    while not (workers := await _started(chat, len(names))) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    worker = workers[0] if workers else "w1"
    killed_at = datetime.now(UTC)
    await asyncio.to_thread(_kill_and_restart, stack, broker, kind, worker)
    closed = await _closed_at(chat, batch, timeout_s)
    if kind == "worker":
        # Back to two workers for the next trial.
        await asyncio.to_thread(stack.procs[WORKERS.get(worker, "operation_worker")].start)
    elif kind != "broker":
        await asyncio.to_thread(stack.procs[KINDS[kind]].wait_ready, 60)
    return Trial(
        kind=kind,
        chat=chat,
        batch_id=batch,
        resources=names,
        kill_to_closing_s=(closed - killed_at).total_seconds(),
        latency_s=latency_ms / 1000,
    )


async def ledger_effects(stack: SurfaceStack, resources: tuple[str, ...]) -> dict[str, int]:
    """Real effects per resource in the provider's ledger."""
    async with httpx.AsyncClient(base_url=stack.provider_url, timeout=10) as http:
        entries = (await http.get("/ledger")).json()["entries"]
    return {r: sum(int(e["effects"]) for e in entries if e["resource"] == r) for r in resources}
