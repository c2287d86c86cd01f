"""One chaos run: start everything, drive sessions under seeded faults, quiesce, check, report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from nats.aio.client import Client

from libs.bus import Context, Topology, connect
from libs.config import BusSettings
from libs.domain import TERMINAL
from testkit.chaos.checks import (
    OPEN,
    Replayed,
    Verdict,
    check_acknowledged,
    check_batches,
    check_deliveries,
    check_effects,
    check_projections,
    replay_all,
)
from testkit.chaos.driver import Driver
from testkit.cluster import Cluster

from .faults import CLUSTER_KINDS, KINDS, Injector
from .system import ChaosSystem

_NUDGE_EVERY_S = 4.0


@dataclass(frozen=True)
class Config:
    """How long, how hard, and with which seed."""

    seed: int
    duration_s: float
    root: Path
    session_loops: int = 4
    quiesce_s: float = 90.0
    gap_s: tuple[float, float] = (1.5, 4.0)
    # A three-node cluster (R3) whose nodes are killed, paused and wiped too.
    cluster: bool = False


def _quiet(state: Replayed) -> bool:
    terminal = all(o.status in TERMINAL for o in state.operations.values())
    # A member with no event yet (its turn died before the admission) is settled by the
    # coordinator's sweep after its grace: waited for like any other member.
    settled = all(
        (op := state.operations.get(m)) is not None and op.status in TERMINAL
        for b in state.batches.values()
        for m in b.members
    )
    return terminal and settled and not any(d.status in OPEN for d in state.deliveries.values())


async def _quiesce(
    nc: Client, topology: Topology, driver: Driver, timeout_s: float
) -> tuple[Replayed, float]:
    """Wait until every operation is terminal and no delivery is still open (bounded).

    A closing that fell back to next-turn resync waits for the user's next turn by design,
    so sessions holding an open delivery get a plain turn now and then.
    """
    started = time.monotonic()
    nudged: dict[str, float] = {}
    js = nc.jetstream()
    state = await replay_all(js, topology)
    while not _quiet(state) and time.monotonic() - started < timeout_s:
        await asyncio.sleep(1.0)
        state = await replay_all(js, topology)
        now = time.monotonic()
        waiting = {
            d.session_id for d in state.deliveries.values() if d.status in OPEN
        }
        for session_id in waiting & set(driver.acked.tokens):
            if now - nudged.get(session_id, started) >= _NUDGE_EVERY_S:
                nudged[session_id] = now
                await driver.nudge(session_id)
    return state, time.monotonic() - started


async def _seen_settles(driver: Driver, state: Replayed, timeout_s: float = 15.0) -> None:
    """Give the WebSocket observers a bounded moment to receive the last pushed messages."""
    shown = {
        d.delivery_id
        for d in state.deliveries.values()
        if d.status.value in {"delivered", "spoken"}
    }
    deadline = time.monotonic() + timeout_s
    while not shown <= driver.acked.seen and time.monotonic() < deadline:
        await asyncio.sleep(0.25)


async def _replay_when_back(nc: Client, topology: Topology, timeout_s: float = 30.0) -> Replayed:
    """Replay once the client has reconnected to the restarted broker (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await replay_all(nc.jetstream(), topology)
        except Exception:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


async def _compensated_records(
    provider: httpx.AsyncClient, state: Replayed
) -> dict[str, dict[str, Any]]:
    """The provider's records that compensations acted on, by id."""
    found: dict[str, dict[str, Any]] = {}
    for op in state.operations.values():
        if op.compensates is not None and op.provider_ref:
            response = await provider.get(f"/v1/records/{op.provider_ref}")
            if response.status_code == 200:
                found[op.provider_ref] = response.json()
    return found


async def run(config: Config) -> dict[str, Any]:
    """The whole run; returns the figures (violations included)."""
    print(
        f"chaos seed={config.seed} faults for {config.duration_s:.0f}s "
        f"(replay with --seed {config.seed})",
        flush=True,
    )
    began = time.monotonic()
    system = ChaosSystem(
        config.root, cluster=Cluster(config.root / "cluster") if config.cluster else None
    )
    nc: Client | None = None
    driver: Driver | None = None
    try:
        await system.start()
        topology = Topology(system.stack.prefix)
        nc = await connect(
            BusSettings(nats_url=system.nats_url, prefix=system.stack.prefix), name="chaos"
        )
        driver = Driver(system.stack.url, system.stack.provider_url, config.seed)
        injector = Injector(
            system,
            nc.jetstream(),
            random.Random(config.seed),
            config.gap_s,
            kinds=CLUSTER_KINDS if config.cluster else KINDS,
        )
        drive = asyncio.create_task(driver.run(config.session_loops))
        await injector.run(config.duration_s)
        driver.stop.set()
        await injector.settle()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(drive, 60)
        await system.disarm()
        await system.all_ready()
        state, quiesced_s = await _quiesce(nc, topology, driver, config.quiesce_s)
        await _seen_settles(driver, state)
        # One last kill -9 of the broker (on a cluster: of a node): everything below is read
        # back after its recovery.
        if config.cluster:
            await system.node_fault(0, kill=True, down_s=0.5)
        else:
            await system.restart_broker(0.5)
        await system.all_ready()
        state = await _replay_when_back(nc, topology)
        verdict = Verdict()
        verdict.violations.extend(injector.violations)
        js = nc.jetstream()
        async with httpx.AsyncClient(base_url=system.stack.provider_url, timeout=30) as provider:
            ledger = (await provider.get("/ledger")).json()["entries"]
            records = await _compensated_records(provider, state)
        check_effects(verdict, state.operations, ledger, records)
        check_batches(verdict, state)
        check_deliveries(verdict, state, driver.acked.seen)
        check_acknowledged(verdict, state, driver.acked)
        async with httpx.AsyncClient(base_url=system.stack.url, timeout=30) as http:
            await check_projections(
                verdict, state, driver.acked, http=http, js=js, topology=topology
            )
        dlq = await js.stream_info(topology.stream_name(Context.DLQ))
        figures: dict[str, Any] = {
            "seed": config.seed,
            "broker": "3-node cluster, R3" if config.cluster else "single node",
            "fault_duration_s": config.duration_s,
            "quiesce_s": round(quiesced_s, 1),
            "wall_s": round(time.monotonic() - began, 1),
            "faults": dict(sorted(injector.injected.items())),
            "faults_total": sum(injector.injected.values()),
            "faults_deferred": sum(injector.deferred.values()),
            "crash_points_fired": dict(sorted(system.fired.items())),
            "unexpected_exits": dict(sorted(system.unexpected_exits.items())),
            "proxy": {"connections": system.proxy.connections, "dropped": system.proxy.dropped},
            "provider_faults": dict(sorted(driver.acked.provider_faults.items())),
            "requests": dict(sorted(driver.acked.requests.items())),
            "sessions": len(state.sessions),
            "dead_letters": int(dlq.state.messages or 0),
            **verdict.figures,
            "violations": len(verdict.violations),
            "violations_by_kind": dict(sorted(verdict.by_kind().items())),
            "violation_samples": verdict.violations[:20],
        }
        return figures
    finally:
        if driver is not None:
            await driver.close_observers()
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
        await system.stop()


def table(figures: dict[str, Any]) -> str:
    """The figures as a two-column text table."""
    rows: list[tuple[str, str]] = []
    for key, value in figures.items():
        if key == "violation_samples":
            continue
        if isinstance(value, dict):
            rows.extend((f"{key}.{k}", json.dumps(v) if isinstance(v, dict) else str(v))
                        for k, v in value.items())
            if not value:
                rows.append((key, "0"))
        else:
            rows.append((key, str(value)))
    width = max(len(k) for k, _ in rows)
    lines = [f"{'figure'.ljust(width)}  value", f"{'-' * width}  -----"]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    for sample in figures.get("violation_samples", []):
        lines.append(f"VIOLATION {sample}")
    return "\n".join(lines)
