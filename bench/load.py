"""What the request-load benchmarks share (`acceptance`, `agent_api`, `mcp`; `messages` and
`cluster` pace their turns with it too): the stack they drive, the two ways they send (back
to back, and paced like people), and their result file.

- `running_stack`: a broker and every service as processes on free localhost ports, in a
  temporary directory, stopped at the end.
- `sequential`: calls back to back (a gap after each, for the unloaded floor); each figure is
  the call's own round trip.
- `paced`: the open loop, a call every period ± jitter, like a person; each figure runs
  from the call's *scheduled* send, so a call held back by the session's previous one still
  counts the wait (no coordinated omission).
- `write_results`: the JSON under `bench/results/`, with when and on what machine.
"""

from __future__ import annotations

import asyncio
import json
import random
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import machine
from testkit.processes import Broker
from testkit.surface import SurfaceStack

# One call of a load generator: a turn, a tool-call request, an MCP `tools/call`.
Call = Callable[[], Awaitable[object]]


@contextmanager
def running_stack(
    env: dict[str, str], surface_env: dict[str, str]
) -> Iterator[tuple[SurfaceStack, Broker]]:
    """A broker and every service, started in a temporary directory; stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="holdline-bench-") as tmp:
        root = Path(tmp)
        broker = Broker(store=root / "nats")
        broker.start()
        stack = SurfaceStack(
            nats_url=broker.url, prefix=f"bench{uuid.uuid4().hex[:6]}", logs=root,
            env=env, surface_env=surface_env,
        )
        try:
            stack.start()
            yield stack, broker
        finally:
            stack.stop()
            broker.stop()


async def sequential(call: Call, calls: int, out: list[float], *, gap_s: float = 0.0) -> None:
    """`calls` calls back to back, `gap_s` apart; each one's round trip, in seconds."""
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        out.append(time.perf_counter() - started)
        if gap_s > 0:
            await asyncio.sleep(gap_s)


@dataclass(frozen=True, slots=True)
class Pace:
    """A person's rhythm: `calls` calls, one every `period_s`, ± `jitter` of it."""

    calls: int
    period_s: float
    jitter: float
    rng: random.Random


async def paced(call: Call, pace: Pace, out: list[float]) -> None:
    """The open loop: the first call at a random point of the first period, each next one a
    period ± jitter after the one before; each figure from when the call was due, not from
    when it left."""
    due = time.perf_counter() + pace.rng.uniform(0, pace.period_s)
    for _ in range(pace.calls):
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        await call()
        out.append(time.perf_counter() - due)
        due += pace.period_s * pace.rng.uniform(1 - pace.jitter, 1 + pace.jitter)


def write_results(
    path: Path, benchmark: str, what: str, figures: dict[str, Any], target: str
) -> None:
    """Write (and print) a benchmark's JSON: what it measures, when, on what machine, its
    figures and the target they are held against."""
    result = {
        "benchmark": benchmark,
        "what": what,
        "at": datetime.now(UTC).isoformat(),
        "machine": machine(),
        **figures,
        "target": target,
    }
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
