"""The worker's work batch (`HOLDLINE_WORK_BATCH`): refused when it is no count, and what a
running worker's standing pull requests on its two consumers (operation events it runs, work
commands) ask the broker for."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from nats.aio.msg import Msg

from libs.bus import Context
from services.operation_worker.settings import DEFAULT_WORK_BATCH
from testkit.ops_stack import StackFactory

ROOT = Path(__file__).resolve().parents[3]


def test_the_worker_does_not_start_with_a_zero_work_batch() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "services.operation_worker"],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOLDLINE_WORK_BATCH": "0", "NATS_URL": "nats://127.0.0.1:9"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert done.stderr.strip().endswith("HOLDLINE_WORK_BATCH must be 1 or more, got 0")


async def test_the_work_batch_reaches_both_consumers_pull_requests(
    make_stack: StackFactory,
) -> None:
    # One worker on the default, one told 3: each standing request names its batch to the
    # broker (asked again every ~2 s), so the bodies seen say what each consumer was given.
    stack = await make_stack(workers=1)
    await stack.add_worker(env={"HOLDLINE_WORK_BATCH": "3"})
    assert stack.nc is not None
    topology = stack.topology
    asked: dict[str, set[int]] = {"work": set(), "dispatch": set()}
    both = asyncio.Event()

    def watch(role: str) -> Callable[[Msg], Awaitable[None]]:
        async def seen(msg: Msg) -> None:
            asked[role].add(int(json.loads(msg.data)["batch"]))
            if asked["work"] >= {3, DEFAULT_WORK_BATCH} <= asked["dispatch"]:
                both.set()

        return seen

    for role, context in (("work", Context.WORK), ("dispatch", Context.OPERATIONS)):
        subject = (
            f"$JS.API.CONSUMER.MSG.NEXT.{topology.stream_name(context)}"
            f".{topology.durable('operation-worker', role)}"
        )
        await stack.nc.subscribe(subject, cb=watch(role))
    # Two requests' lifetimes and more; on a timeout the assertions say what was asked.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(both.wait(), timeout=10.0)
    assert asked["work"] == {3, DEFAULT_WORK_BATCH}
    # The operations consumer runs the work itself, so it takes the work batch too.
    assert asked["dispatch"] == {3, DEFAULT_WORK_BATCH}
