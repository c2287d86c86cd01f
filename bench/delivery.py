"""What one delivery costs a consumer process: holdline's durable consumer against the floor.

Under a paced load each consumer receives its events one at a time (the cost model in
docs/concepts/performance.md: about fifteen deliveries a chat turn over the services, each woken on
its own). This measures the client CPU of one such delivery, the handler doing nothing:

- `consumer`: `libs.bus.DurableConsumer`, as every service runs it (standing pull request,
  per-session order, heartbeat timer, tracing span, acknowledgement);
- `floor`: the least a consumer can do with nats-py's parser: a callback where the parser
  reads the message decodes the event, reads its stream position and writes the ack.

Each variant runs in a process of its own (its CPU is read from inside it, over the
deliveries after a warm-up) while this process appends events one at a time, `--gap-ms`
apart, on a fresh stream per round; rounds alternate the variants. Everything runs on
127.0.0.1 and stops by itself.

    .venv/bin/python -m bench.delivery [--deliveries 2000] [--rounds 3] [--gap-ms 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import uvloop

from bench.common import machine, wakeups
from libs.bus import (
    Context,
    DurableConsumer,
    Received,
    Topology,
    connect,
    ensure_consumer,
    ensure_streams,
    position,
    spec_for,
)
from libs.config import BusSettings
from libs.events import OPERATIONS, Envelope, OperationAdmitted, OperationEvent
from testkit.processes import Broker
from testkit.writer import append

VARIANTS = ("consumer", "floor")
WARM = 200
OUT = Path("bench/results/delivery.json")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Meter:
    """CPU and wake-ups of this process over the deliveries after the warm-up."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.seen = 0
        self.done = asyncio.Event()
        self._start = (0.0, 0)
        self.result: dict[str, float] = {}

    def count(self) -> None:
        self.seen += 1
        if self.seen == WARM:
            self._start = (_cpu_s(), wakeups(os.getpid()))
        elif self.seen == self.total:
            n = self.total - WARM
            self.result = {
                "deliveries": n,
                "cpu_us_per_delivery": round((_cpu_s() - self._start[0]) / n * 1e6, 1),
                "wakeups_per_delivery": round((wakeups(os.getpid()) - self._start[1]) / n, 2),
            }
            self.done.set()


async def _consumer(settings: BusSettings, total: int) -> dict[str, float]:
    nc = await connect(settings, name="bench-delivery")
    js = nc.jetstream()
    topology = Topology(settings.prefix)
    meter = _Meter(total)

    async def handle(received: Received[OperationEvent]) -> None:
        meter.count()

    consumer = DurableConsumer(
        js,
        spec_for(topology, Context.OPERATIONS, durable="bench", ack_wait_s=3.0, max_deliver=3),
        OPERATIONS,
        handle,
        topology=topology,
        source=Context.OPERATIONS,
    )
    task = asyncio.create_task(consumer.run())
    await consumer.ready.wait()
    print("ready", flush=True)
    await asyncio.wait_for(meter.done.wait(), 600)
    consumer.stop()
    await asyncio.wait_for(task, 10)
    await nc.close()
    return meter.result


async def _floor(settings: BusSettings, total: int) -> dict[str, float]:
    nc = await connect(settings, name="bench-delivery")
    js = nc.jetstream()
    topology = Topology(settings.prefix)
    spec = spec_for(topology, Context.OPERATIONS, durable="bench", ack_wait_s=3.0, max_deliver=3)
    await ensure_consumer(js, spec)
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    meter = _Meter(total)
    parsed = nc._process_msg

    async def at_parser(
        sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        # A stored event comes with its headers; a status ("NATS/1.0 100 ...") takes nats-py's way.
        if sid != sub._id or (headers and headers[8:9] != b"\r"):
            await parsed(sid, subject, reply, data, headers)
            return
        OPERATIONS.decode(data)
        position(reply.decode())
        nc._pending.append(b"PUB " + reply + b" 0\r\n\r\n")
        nc._pending_data_size += len(reply) + 10
        if nc._flush_queue is not None and nc._flush_queue.empty():
            nc._flush_queue.put_nowait(asyncio.get_running_loop().create_future())
        meter.count()

    nc._process_msg = at_parser  # type: ignore[method-assign]
    request = {"batch": total + 10, "expires": int(600e9)}
    await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{spec.stream}.{spec.durable}",
                     json.dumps(request).encode(), inbox)
    await nc.flush()
    print("ready", flush=True)
    await asyncio.wait_for(meter.done.wait(), 600)
    await nc.close()
    return meter.result


def _event(i: int) -> Envelope[OperationEvent]:
    return Envelope(
        event_id=f"e{i}",
        session_id=f"s{i % 30}",
        operation_id=f"o{i}",
        intent_key=f"ik{i}",
        batch_id=f"b{i}",
        occurred_at=datetime.now(UTC),
        event=OperationAdmitted(tool="t", arguments={"n": i}, tenant_id="t", user_id="u"),
    )


async def _round(broker: Broker, variant: str, prefix: str, total: int, gap_s: float) -> Any:
    settings = BusSettings(nats_url=broker.url, prefix=prefix)
    nc = await connect(settings, name="bench-delivery-publisher")
    js = nc.jetstream()
    topology = Topology(prefix)
    await ensure_streams(js, topology, settings)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.delivery", "--child", variant, "--url", broker.url,
        "--prefix", prefix, "--deliveries", str(total), stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        if (await child.stdout.readline()).strip() != b"ready":
            raise RuntimeError(f"{variant} did not start")
        for i in range(total):
            env = _event(i)
            subject = topology.operation_subject(env.session_id, str(env.operation_id))
            await append(js, OPERATIONS, subject, env)
            await asyncio.sleep(gap_s)
        out = (await asyncio.wait_for(child.stdout.read(), 120)).decode()
        await child.wait()
    finally:
        if child.returncode is None:
            child.kill()
    await nc.close()
    return json.loads(out.strip().splitlines()[-1])


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        broker = Broker(store=Path(tmp) / "store")
        broker.start()
        try:
            rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
            for r in range(args.rounds):
                for variant in VARIANTS:
                    result = await _round(broker, variant, f"bd{r}{variant[0]}",
                                          args.deliveries, args.gap_ms / 1000)
                    rows[variant].append(result)
                    print(f"round {r + 1} {variant}: {result}", flush=True)
        finally:
            broker.stop()
    summary = {
        v: {
            "cpu_us_per_delivery_median": statistics.median(
                row["cpu_us_per_delivery"] for row in rows[v]),
            "wakeups_per_delivery_median": statistics.median(
                row["wakeups_per_delivery"] for row in rows[v]),
            "rounds": rows[v],
        }
        for v in VARIANTS
    }
    report = {
        "benchmark": "delivery",
        "what": "client CPU per delivery, one at a time, a no-op handler: the durable "
                "consumer against the floor (decode, position, ack where the parser reads it)",
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        "gap_ms": args.gap_ms,
        "load_avg_1m": os.getloadavg()[0],
        **summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({v: summary[v]["cpu_us_per_delivery_median"] for v in VARIANTS}))


def main() -> None:
    """Parse the arguments; run the rounds, or one variant as a child process."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deliveries", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-ms", type=float, default=2.0)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("--url")
    parser.add_argument("--prefix")
    args = parser.parse_args()
    if args.deliveries <= WARM:
        parser.error(f"--deliveries must be above the {WARM} warm-up deliveries")
    if args.child:
        settings = BusSettings(nats_url=args.url, prefix=args.prefix)
        run = _consumer if args.child == "consumer" else _floor
        print(json.dumps(uvloop.run(run(settings, args.deliveries))), flush=True)
        return
    uvloop.run(_main(args))


if __name__ == "__main__":
    main()
