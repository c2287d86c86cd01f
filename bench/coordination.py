"""Coordination latency at 200 concurrent sessions (issue 4's benchmark; not a timed test).

    .venv/bin/python -m bench.coordination [--sessions 200] [--out bench/results/coordination.json]

Starts a private nats-server and the two coordination services, then for every session
opens a two-member batch, commits the first member, then commits every session's last
member spread over a window (`--spread-s`, default 2 s; a 0 s burst is reported too). Measured
from this process's clock: the last member's `operation.committed` append → `delivery.ready`
seen on the bus, and `delivery.ready` → the policy's first `delivery.decided` (idle chat
channel, so the decision is `deliver_now`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from libs.bus import Topology, connect, ensure_buckets, ensure_streams
from libs.config import BusSettings
from libs.domain.batch import final_delivery_id
from libs.events import (
    BATCHES,
    DELIVERIES,
    INTERACTION,
    OPERATIONS,
    BatchOpened,
    DeliveryDecided,
    DeliveryReady,
    Envelope,
    OperationAdmitted,
    OperationCommitted,
    SessionOpened,
)
from testkit.processes import Broker, ServiceProcess, free_port
from testkit.writer import append

TARGET_P99_MS = 25.0


def _env(session: str, event: Any, **ids: Any) -> Envelope[Any]:
    return Envelope(
        event_id=f"bench-{time.monotonic_ns()}-{id(event)}",
        occurred_at=datetime.now(UTC),
        session_id=session,
        event=event,
        **ids,
    )


def _percentiles(values_s: list[float]) -> dict[str, float]:
    ms = sorted(v * 1000 for v in values_s)
    cuts = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "p50": round(cuts[49], 3),
        "p99": round(cuts[98], 3),
        "max": round(ms[-1], 3),
        "mean": round(statistics.fmean(ms), 3),
        "n": len(ms),
    }


def _cpu() -> dict[str, Any]:
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"model": model, "logical_cpus": os.cpu_count(), "machine": platform.machine()}


class Recorder:
    """First time each delivery's ready and decided events were seen on the bus."""

    def __init__(self) -> None:
        self.ready: dict[str, float] = {}
        self.decided: dict[str, float] = {}
        self.done = asyncio.Event()
        self.expected = 0

    async def on_msg(self, msg: Any) -> None:
        at = time.monotonic()
        env = DELIVERIES.decode(msg.data)
        key = env.delivery_id or ""
        if isinstance(env.event, DeliveryReady):
            self.ready.setdefault(key, at)
        elif isinstance(env.event, DeliveryDecided):
            self.decided.setdefault(key, at)
        if len(self.decided) >= self.expected and len(self.ready) >= self.expected:
            self.done.set()


async def _session(js: Any, topo: Topology, session: str) -> tuple[str, str]:
    batch = f"{session}b"
    ops = (f"{session}o1", f"{session}o2")
    await append(js, INTERACTION, topo.session_subject(session),
                 _env(session, SessionOpened(user_id="u", tenant_id="t", agent="a",
                                             token_hash="h")))  # noqa: S106 - not a secret
    await append(js, BATCHES, topo.batch_subject(session, batch),
                 _env(session, BatchOpened(operation_ids=ops), batch_id=batch, turn_id="t1"))
    for op in ops:
        await append(js, OPERATIONS, topo.operation_subject(session, op),
                     _env(session, OperationAdmitted(tool="provision_access",
                                                     arguments={"access": op}, tenant_id="t",
                                                     user_id="u"),
                          operation_id=op, batch_id=batch))
    await append(js, OPERATIONS, topo.operation_subject(session, ops[0]),
                 _env(session, OperationCommitted(result={}), operation_id=ops[0],
                      batch_id=batch))
    return batch, ops[1]


async def _round(js: Any, topo: Topology, recorder: Recorder, tag: str, *, sessions: int,
                 spread_s: float) -> tuple[list[float], list[float]]:
    names = [f"{tag}{i}" for i in range(sessions)]
    prepared = await asyncio.gather(*(_session(js, topo, s) for s in names))
    await asyncio.sleep(1.0)  # let the first members settle: only the last one is measured
    recorder.expected = len(recorder.ready) + sessions
    recorder.done.clear()
    committed: dict[str, float] = {}

    async def last(index: int, session: str, batch: str, op: str) -> None:
        # Spread evenly over the window: sessions finish at their own pace, not in lockstep.
        await asyncio.sleep(spread_s * index / sessions)
        committed[final_delivery_id(batch)] = time.monotonic()
        await append(js, OPERATIONS, topo.operation_subject(session, op),
                     _env(session, OperationCommitted(result={}), operation_id=op,
                          batch_id=batch))

    await asyncio.gather(*(last(i, s, b, o)
                           for i, (s, (b, o)) in enumerate(zip(names, prepared, strict=True))))
    await asyncio.wait_for(recorder.done.wait(), timeout=60)
    to_ready = [recorder.ready[d] - t for d, t in committed.items()]
    to_decision = [recorder.decided[d] - recorder.ready[d] for d in committed]
    return to_ready, to_decision


async def _bench(url: str, prefix: str, sessions: int, spread_s: float) -> dict[str, Any]:
    settings = BusSettings(nats_url=url, prefix=prefix)
    topo = Topology(prefix)
    nc = await connect(settings, name="bench")
    js = nc.jetstream()
    await ensure_streams(js, topo, settings)
    await ensure_buckets(js, topo, settings)
    recorder = Recorder()
    await nc.subscribe(topo.context_filter(topo.streams()[4].context), cb=recorder.on_msg)
    await _round(js, topo, recorder, "warm", sessions=20, spread_s=0.2)
    to_ready, to_decision = await _round(js, topo, recorder, "s", sessions=sessions,
                                           spread_s=spread_s)
    # The worst case, for the record: every session's last member commits in the same instant.
    burst_ready, burst_decision = await _round(js, topo, recorder, "burst", sessions=sessions,
                                                spread_s=0.0)
    await nc.close()
    return {
        "benchmark": "coordination",
        "sessions": sessions,
        "spread_s": spread_s,
        "last_committed_to_delivery_ready_ms": _percentiles(to_ready),
        "delivery_ready_to_decision_idle_ms": _percentiles(to_decision),
        "burst": {
            "last_committed_to_delivery_ready_ms": _percentiles(burst_ready),
            "delivery_ready_to_decision_idle_ms": _percentiles(burst_decision),
        },
        "target_p99_ms": TARGET_P99_MS,
    }


def main() -> None:
    """Run the benchmark and write its JSON."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--spread-s", type=float, default=2.0,
                        help="window over which the sessions' last members commit")
    parser.add_argument("--out", default="bench/results/coordination.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-coordination-"))
    broker = Broker(store=work / "store")
    broker.start()
    prefix = "bench"
    env = {"NATS_URL": broker.url, "HOLDLINE_PREFIX": prefix, "HOLDLINE_LOG_LEVEL": "WARNING"}
    c_port, p_port = free_port(), free_port()
    procs = [
        ServiceProcess("batch_coordinator", {**env, "BATCH_COORDINATOR_PORT": str(c_port)},
                       c_port, work / "batch_coordinator.log"),
        ServiceProcess("delivery_policy", {**env, "DELIVERY_POLICY_PORT": str(p_port)},
                       p_port, work / "delivery_policy.log"),
    ]
    try:
        for proc in procs:
            proc.start()
        result = asyncio.run(_bench(broker.url, prefix, args.sessions, args.spread_s))
    finally:
        for proc in procs:
            proc.kill9()
        broker.stop()
    result.update({
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": _cpu(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    })
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
