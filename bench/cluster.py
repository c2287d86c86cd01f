"""Scale-out on one machine: a single node next to a three-node JetStream cluster (R3).

`.venv/bin/python -m bench.cluster` runs the same processes twice, once on one nats-server
and once on three routed ones with every stream and bucket R3: two interaction surfaces,
two workers, the coordinator and the policy as two partitions each. For each it measures

- acceptance: paced chat turns over HTTP (N sessions, a turn every P s ± 30 %), the
  client's round trip of `POST …/turns`, p50/p99 (as bench.acceptance's paced run);
- operations/s: committed operations per second through both workers, closed loop,
  provider latency 0 (as bench.ops's first round);

and, on the cluster, the time from a `kill -9` of a node to the closing of every batch that
was in flight (each effect held 1 s by the provider): the node leading the operations stream
(a Raft election: nats-server's election timeout is 4-9 s, randomised) and a node that only
carries client connections and other streams. Results go to `bench/results/cluster.json`.
Everything shares the machine: on 2 cores three brokers and ten processes compete for CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.acceptance import _measure
from bench.common import machine, percentiles_ms
from bench.load import Pace, paced
from bench.ops import run_round
from libs.bus import Context, Topology
from libs.config import BusSettings
from testkit.cluster import Cluster
from testkit.cluster_harness import CLUSTER_ENV, EXTRA, Conversations, now, replicas_current
from testkit.processes import Broker
from testkit.surface import SurfaceStack

RESULTS = Path(__file__).parent / "results" / "cluster.json"
KILL_LATENCY_MS = 1000


def _stack(nats_url: str, root: Path, replicas: int) -> SurfaceStack:
    # Production's client pings (5 s): the tests' 1 s would make a starved process drop
    # its connection on a loaded machine, which is not what is measured here.
    env = {
        **{k: v for k, v in CLUSTER_ENV.items() if "PING" not in k},
        "HOLDLINE_STREAM_REPLICAS": str(replicas),
        "HOLDLINE_LOG_LEVEL": "WARNING",
    }
    return SurfaceStack(
        nats_url=nats_url,
        prefix=f"bench{uuid.uuid4().hex[:6]}",
        logs=root,
        env=env,
        surface_env={"HOLDLINE_TURN_PHASES": "1"},
        second_surface_env={},
        extra=dict(EXTRA),
    )


async def _throughput(stack: SurfaceStack, replicas: int, operations: int,
                      sessions: int) -> dict[str, Any]:
    workers = [stack.procs["operation_worker"], stack.procs["operation_worker_2"]]
    settings = BusSettings(nats_url=stack.nats_url, prefix=stack.prefix, replicas=replicas)
    return await run_round(
        settings, workers, stack.provider_url, operations=operations, sessions=sessions,
        latency_ms=0, tag="cl",
    )


def _measure_topology(stack: SurfaceStack, replicas: int, args: argparse.Namespace,
                      rng: random.Random) -> dict[str, Any]:
    pids = {name: p.proc.pid for name, p in stack.procs.items() if p.proc is not None}
    load_before = os.getloadavg()[0]
    acceptance = asyncio.run(_measure(
        stack.url, pids, args.sessions,
        lambda s, out: paced(s.turn, Pace(args.turns, args.period, 0.3, rng), out),
    ))
    ops = asyncio.run(_throughput(stack, replicas, args.operations, args.op_sessions))
    return {
        "acceptance": acceptance["acceptance"],
        "acceptance_sessions": args.sessions,
        "acceptance_period_s": args.period,
        "operations_committed_per_s": ops["committed_per_s"],
        "operations": ops["operations"],
        "operation_sessions": ops["sessions"],
        "admission": ops["admission"],
        # The machine is shared: its 1-minute load average before and after, on 2 cores.
        "load_average_1m": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


async def _kill_trials(cluster: Cluster, stack: SurfaceStack, trials: int) -> dict[str, Any]:
    """kill -9 of a node mid-batch, alternately the operations leader and another node."""
    stream = Topology(stack.prefix).stream_name(Context.OPERATIONS)
    found: dict[str, list[float]] = {"leader": [], "other": []}  # seconds
    async with Conversations(stack, latency_ms=KILL_LATENCY_MS) as conv:
        chats = await conv.open(4)
        async with httpx.AsyncClient(base_url=stack.provider_url) as provider:
            await provider.delete("/admin/faults")
        for trial in range(trials * 2):
            kind = "leader" if trial % 2 == 0 else "other"
            leader = await cluster.leader(stream)
            target = leader if kind == "leader" else next(
                n for n in cluster.names if n != leader
            )
            batches = await conv.ask_all(chats, resources=2)
            killed_at = now()
            cluster.node(target).kill9()
            closes = await conv.close_times(batches, killed_at)
            found[kind].extend(closes)
            print(f"kill -9 {kind} {target}: closings {sorted(round(c, 2) for c in closes)} s",
                  flush=True)
            cluster.restart(target)
            await replicas_current(cluster, stack.prefix)
    return {
        "provider_latency_ms": KILL_LATENCY_MS,
        "target_s": KILL_LATENCY_MS / 1000 + 5,
        "operations_leader_killed": percentiles_ms(found["leader"]),
        "other_node_killed": percentiles_ms(found["other"]),
    }


def main() -> None:
    """Both topologies, then the kills; write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=20, help="paced acceptance sessions")
    parser.add_argument("--turns", type=int, default=6, help="paced turns per session")
    parser.add_argument("--period", type=float, default=2.0, help="seconds between turns")
    parser.add_argument("--operations", type=int, default=600)
    parser.add_argument("--op-sessions", type=int, default=30)
    parser.add_argument("--kill-trials", type=int, default=2, help="per kind of node")
    args = parser.parse_args()
    rng = random.Random(7)  # noqa: S311 - jitter of a load generator, not a secret
    result: dict[str, Any] = {
        "benchmark": "scale-out",
        "what": "single node vs 3-node JetStream cluster (R3), two workers, two surfaces, "
                "coordinator and policy in two partitions; kill -9 of a node mid-batch",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
    }
    with tempfile.TemporaryDirectory(prefix="holdline-bench-cluster-") as tmp:
        root = Path(tmp)
        broker = Broker(store=root / "single" / "nats")
        broker.start()
        single = _stack(broker.url, root / "single", 1)
        try:
            single.start()
            result["single_node"] = _measure_topology(single, 1, args, rng)
        finally:
            single.stop()
            broker.stop()
        print("single node:", json.dumps(result["single_node"]), flush=True)
        cluster = Cluster(root / "cluster")
        cluster.start()
        asyncio.run(cluster.wait_meta_leader())
        # Reads of an aggregate ask the leader first with replicated streams (libs.bus.replay).
        os.environ["HOLDLINE_STREAM_REPLICAS"] = "3"
        stack = _stack(cluster.url, root / "cluster", 3)
        try:
            stack.start()
            result["cluster_r3"] = _measure_topology(stack, 3, args, rng)
            print("cluster:", json.dumps(result["cluster_r3"]), flush=True)
            started = time.monotonic()
            result["node_kill_to_closing"] = asyncio.run(
                _kill_trials(cluster, stack, args.kill_trials)
            )
            result["node_kill_to_closing"]["wall_s"] = round(time.monotonic() - started, 1)
        finally:
            stack.stop()
            cluster.stop()
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
