"""SIGTERM drains a worker: it stops pulling, hands back what it cannot finish, exits 0,
and another worker completes the operation exactly once."""

from __future__ import annotations

import asyncio
import signal
import time
import uuid
from pathlib import Path

import pytest

from libs.config import BusSettings
from testkit.ops_stack import OpsStack, types


@pytest.mark.timeout(90)
async def test_sigterm_hands_back_a_slow_operation_that_another_worker_finishes_once(
    bus_settings: BusSettings, logs_dir: Path
) -> None:
    stack = OpsStack(
        settings=bus_settings,
        logs=logs_dir,
        # A whole attempt fits in its timeout: only the shutdown interrupts it.
        worker_env={"HOLDLINE_GRACEFUL_SHUTDOWN_S": "1", "HOLDLINE_TIMEOUT_SCALE": "1"},
    )
    await stack.start(workers=0)
    try:
        leaving = await stack.add_worker(callback=True)
        resource = f"slow-{uuid.uuid4().hex[:6]}"
        await stack.fault(match=resource, latency_ms=3000, times=1)
        ctx = stack.turn()
        turn = await stack.admit(ctx, ("provision_access", {"accesses": [resource]}))
        op = turn.outcomes[0].operation_id
        await stack.wait_status(ctx.session_id, op, "running")
        assert leaving.proc is not None
        sent = time.monotonic()
        leaving.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(leaving.proc.wait, 30)
        took = time.monotonic() - sent
        assert code == 0, leaving.tail()
        log = leaving.log_path.read_text()
        assert "handed back 1 in-flight messages" in log, leaving.tail()
        assert "operation-worker: drained" in log
        # Grace (1 s) plus HTTP shutdown and the connection drain, generously bounded.
        assert took < 20, took
        await stack.add_worker()
        await stack.wait_status(ctx.session_id, op, "committed", timeout_s=40)
        _, events = await stack.operation(ctx.session_id, op)
        assert types(events).count("operation.committed") == 1
        assert await stack.effects(resource) == 1
    finally:
        await stack.stop()
