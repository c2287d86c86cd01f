"""The fault injector: one seeded RNG picks what breaks next and when.

Kinds, named for what they really do:
- `kill9:<service>` / `kill9:broker`: SIGKILL, then start again on the same port/store;
- `pause`: SIGSTOP of a worker, the coordinator, the policy or the surface for 1.5-2.5x
  ack_wait, then SIGCONT. Its unacknowledged messages are redelivered meanwhile (to the
  other worker when it was a worker) and the resumed process finishes them too: the same
  message is handled twice and out of order. (Kills and crash points before an ack also
  redeliver what was already applied.) This is the harness's "duplicated and reordered
  deliveries": it injects them through the broker's own redelivery, not a fake;
- `crash_point`: restart a worker or the coordinator with one named crash point armed
  (`libs/crash.py`); it kills itself there, the watchdog restarts it unarmed;
- `proxy_latency` / `proxy_drop`: the first worker reaches the broker through `TcpProxy`,
  which adds latency for a few seconds or cuts every connection;
- `duplicate_publish`: re-publish a stored event with its `Nats-Msg-Id` (expected-sequence
  headers removed): the broker must answer `duplicate` and store nothing.

On a cluster (`--cluster`) the whole-broker kill gives way to faults of one node at a time,
so a quorum always remains: `node_kill9` (down 0.5-3 s), `node_pause` (SIGSTOP for 2-12 s,
often past the Raft election timeout of 4-9 s), `node_restart` (SIGTERM: lame duck, then
back) and `node_empty_disk` (kill -9, store deleted, back empty: it must catch up from the
others).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from nats.js import JetStreamContext

from libs.bus import Context, Topology
from libs.crash import POINTS

from .system import ACK_WAIT_S, ChaosSystem

log = logging.getLogger("chaos")

KINDS = (
    "kill9:operation_worker",
    "kill9:batch_coordinator",
    "kill9:delivery_policy",
    "kill9:interaction_surface",
    "kill9:sandbox_provider",
    "kill9:broker",
    "pause",
    "crash_point",
    "proxy_latency",
    "proxy_drop",
    "duplicate_publish",
)
NODE_KINDS = ("node_kill9", "node_pause", "node_restart", "node_empty_disk")
CLUSTER_KINDS = tuple(k for k in KINDS if k != "kill9:broker") + NODE_KINDS
_PAUSABLE = (
    "operation_worker",
    "operation_worker_2",
    "batch_coordinator",
    "delivery_policy",
    "interaction_surface",
)
_WORKERS = ("operation_worker", "operation_worker_2")
_EVENT_STREAMS = (Context.INTERACTION, Context.OPERATIONS, Context.BATCHES, Context.DELIVERIES)
# Only events this recent are re-published: well inside the broker's duplicate window.
_RECENT_S = 60.0
_RECENT_SEQS = 40


@dataclass
class Injector:
    """Injects faults into a running `ChaosSystem` until told to stop."""

    system: ChaosSystem
    js: JetStreamContext
    rng: random.Random
    gap_s: tuple[float, float] = (1.5, 4.0)
    kinds: tuple[str, ...] = KINDS
    injected: Counter[str] = field(default_factory=Counter)
    # Picked but not possible at that moment (target busy, nothing to cut): tried again later.
    deferred: Counter[str] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    _background: set[asyncio.Task[None]] = field(default_factory=set)
    _t0: float = field(default_factory=time.monotonic)

    async def run(self, duration_s: float) -> None:
        """Every kind once in a seeded order, then seeded random picks, until the time is up.

        On a slow box the first round may outlast `duration_s`; it is finished anyway (within
        half as long again), so every run injects every kind.
        """
        deadline = time.monotonic() + duration_s
        overtime = deadline + duration_s / 2
        plan = list(self.kinds)
        self.rng.shuffle(plan)
        while (now := time.monotonic()) < deadline or (plan and now < overtime):
            await asyncio.sleep(self.rng.uniform(*self.gap_s))
            if time.monotonic() >= (overtime if plan else deadline):
                break
            kind = plan.pop(0) if plan else self.rng.choice(self.kinds)
            try:
                done = await self._inject(kind)
            except Exception as exc:  # not injected now; retried later
                log.warning("fault %s not injected: %r", kind, exc)
                done = False
            if not done:
                self.deferred[kind] += 1
                # A kind is retried until it was injected once (the short run needs all).
                if not self.injected[kind]:
                    plan.append(kind)

    async def settle(self) -> None:
        """Wait for background faults (pauses, latency windows) to end; no new ones start."""
        await asyncio.gather(*self._background, return_exceptions=True)
        self.system.proxy.latency_s = 0.0
        for proc in self.system.procs.values():
            proc.resume()

    def _say(self, kind: str, detail: str) -> None:
        self.injected[kind] += 1
        print(f"[chaos {time.monotonic() - self._t0:7.1f}s] {kind} {detail}", flush=True)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _inject(self, kind: str) -> bool:
        system = self.system
        if kind == "kill9:broker":
            if "broker" in system.busy:
                return False
            down = self.rng.uniform(0.5, 2.0)
            self._say(kind, f"down {down:.1f}s")
            await system.restart_broker(down)
            return True
        if kind in NODE_KINDS:
            return self._node(kind)
        if kind.startswith("kill9:"):
            name = kind.split(":", 1)[1]
            if name == "operation_worker":
                name = self.rng.choice(_WORKERS)
            if name in system.busy:
                return False
            self._say(kind, name)
            await system.restart(name)
            return True
        if kind == "pause":
            free = [n for n in _PAUSABLE if n not in system.busy]
            if not free:
                return False
            name = self.rng.choice(free)
            seconds = ACK_WAIT_S * self.rng.uniform(1.5, 2.5)
            self._say(kind, f"{name} SIGSTOP {seconds:.1f}s")
            system.busy.add(name)  # claimed now, before the task runs
            self._spawn(self._pause(name, seconds))
            return True
        if kind == "crash_point":
            return await self._crash_point()
        if kind == "proxy_latency":
            if system.proxy.latency_s:
                return False
            latency, seconds = self.rng.uniform(0.05, 0.4), self.rng.uniform(2.0, 6.0)
            self._say(kind, f"{latency * 1000:.0f}ms for {seconds:.1f}s")
            self._spawn(self._latency(latency, seconds))
            return True
        if kind == "proxy_drop":
            cut = system.proxy.drop()
            if not cut:
                return False
            self._say(kind, f"{cut} connections cut")
            return True
        if kind == "duplicate_publish":
            return await self._duplicate()
        raise ValueError(kind)

    def _node(self, kind: str) -> bool:
        system = self.system
        if "broker" in system.busy:
            return False  # one node at a time: the other two keep the quorum
        index = self.rng.randrange(len(system.nodes))
        system.busy.add("broker")  # claimed now, before the task runs
        if kind == "node_pause":
            seconds = self.rng.uniform(2.0, 12.0)
            self._say(kind, f"n{index} SIGSTOP {seconds:.1f}s")
            self._spawn(self._node_task(system.pause_node(index, seconds)))
            return True
        down = self.rng.uniform(0.5, 3.0)
        self._say(kind, f"n{index} down {down:.1f}s")
        self._spawn(
            self._node_task(
                system.node_fault(
                    index,
                    kill=kind != "node_restart",
                    down_s=down,
                    empty_disk=kind == "node_empty_disk",
                )
            )
        )
        return True

    async def _node_task(self, fault: Coroutine[Any, Any, None]) -> None:
        self.system.busy.discard("broker")
        await fault

    async def _pause(self, name: str, seconds: float) -> None:
        self.system.busy.discard(name)
        await self.system.pause(name, seconds)

    async def _latency(self, latency: float, seconds: float) -> None:
        self.system.proxy.latency_s = latency
        try:
            await asyncio.sleep(seconds)
        finally:
            self.system.proxy.latency_s = 0.0

    async def _crash_point(self) -> bool:
        system = self.system
        point = self.rng.choice(sorted(POINTS))
        names = _WORKERS if point.startswith("worker.") else ("batch_coordinator",)
        free = [n for n in names if n not in system.busy and n not in system.armed]
        if not free:
            return False
        name = self.rng.choice(free)
        self._say("crash_point", f"{point} armed in {name}")
        await system.restart(name, crash_point=point)
        return True

    async def _duplicate(self) -> bool:
        context = self.rng.choice(_EVENT_STREAMS)
        stream = Topology(self.system.stack.prefix).stream_name(context)
        info = await self.js.stream_info(stream)
        last, first = int(info.state.last_seq or 0), int(info.state.first_seq or 0)
        if last == 0:
            return False
        seq = self.rng.randint(max(first, last - _RECENT_SEQS), last)
        msg = await self.js.get_msg(stream, seq)
        headers = dict(msg.headers or {})
        msg_id = headers.get("Nats-Msg-Id")
        age = (datetime.now(UTC) - msg.time).total_seconds() if msg.time else _RECENT_S
        if not msg_id or age >= _RECENT_S or msg.subject is None:
            return False
        headers = {k: v for k, v in headers.items() if not k.startswith("Nats-Expected")}
        ack = await self.js.publish(msg.subject, msg.data or b"", headers=headers)
        self._say("duplicate_publish", f"{stream}#{seq} id={msg_id} duplicate={ack.duplicate}")
        if not ack.duplicate:
            self.violations.append(
                f"duplicate_accepted: {stream}#{seq} re-published as #{ack.seq}"
            )
        return True
