"""Operation plane benchmark: admission → worker → provider, end to end, on one machine.

Drives N single-item turns across M concurrent sessions (provider latency 0 and 50 ms) and
measures committed operations per second, admission latency, admitted→started,
started→committed and admitted→committed, worker CPU and the workers' broker messages
(sent/received, the broker's `/connz` counts) per operation, and — on the same broker, in
the same run —
the raw JetStream acked-publish rate (sequential and pipelined), so the pipeline's cost
shows as a ratio. Everything runs on 127.0.0.1 and stops by itself.

    .venv/bin/python -m bench.ops [--operations 2000] [--sessions 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import cpu_seconds, machine, percentiles_ms
from libs.admission import Admission, LoadView, ToolCall, TurnContext
from libs.bus import NatsEventStore, Topology, connect, ensure_buckets, ensure_streams
from libs.config import BusSettings
from libs.events import Envelope, OperationCommitted, OperationEvent, OperationStarted
from libs.tools import default_registry
from testkit.processes import Broker, ServiceProcess, free_port


def worker_messages(monitor: int | None) -> tuple[int, int]:
    """(sent, received) broker messages of the workers' connections, as the broker counts."""
    if monitor is None:
        return (0, 0)
    raw = httpx.get(f"http://127.0.0.1:{monitor}/connz?limit=1024", timeout=5).json()
    conns = [c for c in raw.get("connections", []) if c.get("name") == "operation-worker"]
    return (sum(int(c["in_msgs"]) for c in conns), sum(int(c["out_msgs"]) for c in conns))


class Clock:
    """Collects admitted/started/committed times per operation from the stream (fed by the
    load view's follower, as the surface feeds its load view from its own: one delivery
    and one decode per event, not two)."""

    def __init__(self) -> None:
        self.admitted: dict[str, datetime] = {}
        self.started: dict[str, datetime] = {}
        self.committed: dict[str, datetime] = {}
        self.started_by: dict[str, str] = {}
        # Off while the follower replays earlier rounds' events: from then on, what is new.
        self.recording = False

    def on_event(self, env: Envelope[OperationEvent], _seq: int) -> None:
        if not self.recording:
            return
        op = env.operation_id or ""
        match env.event:
            case OperationStarted(worker_id=worker) if op not in self.started:
                self.started[op] = env.occurred_at
                self.started_by[op] = worker
            case OperationCommitted():
                self.committed[op] = env.occurred_at
            case _ if env.event.__struct_config__.tag == "operation.admitted":
                self.admitted[op] = env.occurred_at


async def raw_publish_rate(settings: BusSettings, count: int) -> dict[str, float]:
    """Acked publishes per second to a plain file stream: one at a time, and pipelined."""
    nc = await connect(settings, name="bench-raw")
    js = nc.jetstream()
    stream = f"RAW_{uuid.uuid4().hex[:8].upper()}"
    await js.add_stream(name=stream, subjects=[f"raw.{stream}.>"])
    payload = b"x" * 400
    started = time.perf_counter()
    for i in range(count):
        await js.publish(f"raw.{stream}.s{i % 200}", payload)
    sequential = count / (time.perf_counter() - started)
    started = time.perf_counter()
    futures = [await js.publish_async(f"raw.{stream}.s{i % 200}", payload) for i in range(count)]
    await asyncio.gather(*futures)
    pipelined = count / (time.perf_counter() - started)
    await js.delete_stream(stream)
    await nc.close()
    return {"sequential_per_s": round(sequential, 1), "pipelined_per_s": round(pipelined, 1)}


async def run_round(
    settings: BusSettings,
    workers: list[ServiceProcess],
    provider_url: str,
    *,
    operations: int,
    sessions: int,
    latency_ms: int,
    pace_s: float | None = None,
    tag: str = "",
    monitor: int | None = None,
    others: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One measured round (fresh resources, so no intent repeats an earlier round's)."""
    topology = Topology(settings.prefix)
    nc = await connect(settings, name="bench-ops")
    js = nc.jetstream()
    await ensure_streams(js, topology, settings)
    await ensure_buckets(js, topology, settings)
    async with httpx.AsyncClient(base_url=provider_url) as client:
        await client.delete("/admin/faults")
        if latency_ms:
            await client.post("/admin/faults", json={"match": "*", "latency_ms": latency_ms})
    view = LoadView()
    clock = Clock()
    await view.follow(js, topology, also=(clock.on_event,))
    # Admission waits for the load view as the surface does (app.py): a round started while
    # the view still replays earlier rounds' events would time that replay, not admission.
    await asyncio.wait_for(view.caught_up.wait(), timeout=120)
    clock.recording = True
    admission = Admission(
        NatsEventStore(js, {}, timings=settings.timings),
        topology,
        default_registry(),
        view,
        await js.key_value(topology.bucket("intents")),
    )
    admission_s: list[float] = []
    rejected: list[str] = []
    per_session = operations // sessions
    operations = per_session * sessions
    # Every process on the two cores: the workers, the broker, the provider, and this one
    # (admission and the clock's subscription), so the round says what bounds its rate.
    pids = {
        **{f"worker {i}": w.proc.pid for i, w in enumerate(workers) if w.proc},
        **(others or {}),
        "bench process (admission, clock)": os.getpid(),
    }
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    msgs_before = worker_messages(monitor)

    async def session(index: int) -> None:
        session_id = f"s{index}_{uuid.uuid4().hex[:6]}"
        if pace_s:
            # Open loop: sessions start spread over one pace interval, like real callers.
            await asyncio.sleep(pace_s * index / sessions)
        for turn in range(per_session):
            turn_started = time.perf_counter()
            # One tenant per session: per-tenant backpressure limits are not what is measured.
            ctx = TurnContext(session_id, f"t{turn}", f"tenant{index}", f"user{index}", "concierge")
            started = time.perf_counter()
            result = await admission.admit(
                ctx,
                [
                    ToolCall(
                        "provision_access",
                        {"accesses": [f"{tag}l{latency_ms}r{index}-{turn}"]},
                        None,
                    )
                ],
            )
            admission_s.append(time.perf_counter() - started)
            rejected.extend(o.reason or "" for o in result.outcomes if o.status == "rejected")
            if pace_s:
                await asyncio.sleep(max(0.0, pace_s - (time.perf_counter() - turn_started)))

    wall = time.perf_counter()
    await asyncio.gather(*(session(i) for i in range(sessions)))
    deadline = time.monotonic() + max(120.0, operations / 20)
    # Only this round's operations count: the stream may carry others still finishing.
    # Polls a count fed by a subscription callback; an Event would need the count inside it.
    while (  # noqa: ASYNC110
        sum(o in clock.admitted for o in clock.committed) < operations - len(rejected)
        and time.monotonic() < deadline
    ):
        await asyncio.sleep(0.05)
    wall = time.perf_counter() - wall
    cpu_used = {name: cpu_seconds(pid) - cpu_before[name] for name, pid in pids.items()}
    msgs_after = worker_messages(monitor)
    await view.close()
    await nc.close()
    ops = [o for o in clock.committed if o in clock.admitted]
    first = min(clock.admitted[o] for o in ops)
    last = max(clock.committed[o] for o in ops)
    return {
        "provider_latency_ms": latency_ms,
        "load": f"open loop, one turn per session every {pace_s} s" if pace_s else "closed loop",
        "operations": len(ops),
        "rejected_at_admission": len(rejected),
        "sessions": sessions,
        "committed_per_s": round(len(ops) / max((last - first).total_seconds(), 1e-9), 1),
        "wall_s": round(wall, 3),
        "admission": percentiles_ms(admission_s),
        "admitted_to_started": percentiles_ms(
            [
                (clock.started[o] - clock.admitted[o]).total_seconds()
                for o in ops
                if o in clock.started
            ]
        ),
        "started_to_committed": percentiles_ms(
            [
                (clock.committed[o] - clock.started[o]).total_seconds()
                for o in ops
                if o in clock.started
            ]
        ),
        "admitted_to_committed": percentiles_ms(
            [(clock.committed[o] - clock.admitted[o]).total_seconds() for o in ops]
        ),
        "worker_cpu_ms_per_operation": round(
            sum(v for k, v in cpu_used.items() if k.startswith("worker")) * 1000 / max(len(ops), 1),
            3,
        ),
        "cpu_ms_per_operation": {
            name: round(used * 1000 / max(len(ops), 1), 3) for name, used in cpu_used.items()
        },
        # Share of the machine's cores the round kept busy (all measured processes).
        "cores_busy": round(sum(cpu_used.values()) / max(wall, 1e-9), 2),
        # How evenly the workers shared the round (operations each started first), largest first.
        "started_per_worker": sorted(
            Counter(clock.started_by[o] for o in ops if o in clock.started_by).values(),
            reverse=True,
        ),
        # Includes the workers' idle traffic over the round (heartbeats, renewals, requests).
        "worker_messages_per_operation": [
            round((after - before) / max(len(ops), 1), 2)
            for before, after in zip(msgs_before, msgs_after, strict=True)
        ],
    }


async def bench(operations: int, sessions: int, workers_n: int) -> dict[str, Any]:
    """Start a broker, the provider and workers; measure both latencies; stop everything."""
    tmp = Path(tempfile.mkdtemp(prefix="holdline-bench-"))
    monitor = free_port()
    broker = Broker(store=tmp / "nats", args=("-m", str(monitor)))
    broker.start()
    provider_port = free_port()
    provider = ServiceProcess(
        "sandbox_provider",
        {
            "SANDBOX_PROVIDER_PORT": str(provider_port),
            "SANDBOX_PROVIDER_DB": str(tmp / "provider.sqlite3"),
            "HOLDLINE_CALLBACK_URL": "off",
            "LOG_LEVEL": "warning",
        },
        provider_port,
        tmp / "provider.log",
    )
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    settings = BusSettings(nats_url=broker.url, prefix=prefix)
    workers = [
        ServiceProcess(
            "operation_worker",
            {
                "NATS_URL": broker.url,
                "HOLDLINE_PREFIX": prefix,
                "OPERATION_WORKER_PORT": str(port),
                "SANDBOX_PROVIDER_URL": f"http://127.0.0.1:{provider_port}",
                "HOLDLINE_LOG_LEVEL": "warning",
            },
            port,
            tmp / f"worker{i}.log",
        )
        for i, port in enumerate(free_port() for _ in range(workers_n))
    ]
    try:
        provider.start()
        for worker in workers:
            worker.start()
        raw = await raw_publish_rate(settings, 5000)
        others = {
            name: proc.pid
            for name, proc in (("nats-server", broker.proc), ("sandbox provider", provider.proc))
            if proc is not None
        }
        rounds = []
        for latency in (0, 50):
            round_settings = BusSettings(nats_url=broker.url, prefix=prefix)
            rounds.append(
                await run_round(
                    round_settings,
                    workers,
                    provider.base_url,
                    operations=operations,
                    sessions=sessions,
                    latency_ms=latency,
                    monitor=monitor,
                    others=others,
                )
            )
        # Admission latency as live sessions see it: each takes a turn every two seconds.
        paced = await run_round(
            BusSettings(nats_url=broker.url, prefix=prefix),
            workers,
            provider.base_url,
            operations=sessions * 5,
            sessions=sessions,
            latency_ms=0,
            pace_s=2.0,
            tag="paced",
            monitor=monitor,
            others=others,
        )
        ratio = round(raw["pipelined_per_s"] / max(rounds[0]["committed_per_s"], 1e-9), 1)
        return {
            "benchmark": "operation plane",
            "machine": machine(),
            "workers": workers_n,
            "work_batch": os.environ.get("HOLDLINE_WORK_BATCH") or "default",
            "raw_jetstream_acked_publish": raw,
            "rounds": rounds,
            "paced": paced,
            "raw_pipelined_publishes_per_committed_operation_rate": ratio,
            "targets": {
                "committed_per_s_at_latency_0": 600,
                "admission_p99_ms_at_200_sessions": 15,
            },
        }
    finally:
        for proc in [*workers, provider]:
            proc.stop()
        broker.stop()


def main() -> None:
    """Run and write bench/results/ops.json."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--operations", type=int, default=2000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out", default="bench/results/ops.json")
    args = parser.parse_args()
    result = asyncio.run(bench(args.operations, args.sessions, args.workers))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    for r in result["rounds"]:
        print(
            f"provider latency {r['provider_latency_ms']} ms: {r['committed_per_s']} committed/s, "
            f"admission p50 {r['admission']['p50_ms']} ms p99 {r['admission']['p99_ms']} ms, "
            f"admitted→started p99 {r['admitted_to_started']['p99_ms']} ms, "
            f"started→committed p99 {r['started_to_committed']['p99_ms']} ms, "
            f"admitted→committed p50 {r['admitted_to_committed']['p50_ms']} ms "
            f"p99 {r['admitted_to_committed']['p99_ms']} ms, "
            f"worker CPU {r['worker_cpu_ms_per_operation']} ms/op, "
            f"worker messages {r['worker_messages_per_operation']} sent/received per op"
        )
    paced = result["paced"]
    print(
        f"admission, {paced['sessions']} sessions, {paced['load']}: "
        f"p50 {paced['admission']['p50_ms']} ms p99 {paced['admission']['p99_ms']} ms"
    )
    raw = result["raw_jetstream_acked_publish"]
    print(
        f"raw JetStream acked publish: {raw['sequential_per_s']}/s sequential, "
        f"{raw['pipelined_per_s']}/s pipelined"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
