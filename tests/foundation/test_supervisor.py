"""`holdline run` (what `make run` calls): all up, the dead restarted, all stopped cleanly."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.run import SERVICES, Running, alive, holdline_run


@pytest.fixture
def system(tmp_path: Path) -> Iterator[Running]:
    """`holdline run` on free ports with its data in a temp dir."""
    with holdline_run(tmp_path) as running:
        yield running


@pytest.mark.timeout(120)
def test_run_starts_everything_restarts_the_dead_and_stops_cleanly(
    system: Running, tmp_path: Path
) -> None:
    proc, output, ports = system.proc, system.output, system.ports
    output.wait_for(r"all 5 services ready\. Open the demo at http://127\.0\.0\.1:\d+/", 60)
    system.wait_ready()
    pids = output.pids()
    assert set(pids) == {*SERVICES, "nats-server"}
    assert (tmp_path / ".data" / "nats").is_dir()
    # Every line of a child's output carries its name.
    assert any(line.startswith("[operation-worker] ") for line in output.lines)
    for name, port in ports.items():
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
        assert metrics.status_code == 200, name
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200

    # kill -9 a service: it comes back, on the same port.
    mark = len(output.lines)
    os.kill(pids["operation-worker"], signal.SIGKILL)
    output.wait_for(r"^\[supervisor\] started operation-worker \(pid \d+\)", 20, after=mark)
    # kill -9 the broker: it comes back with its file store, and services reconnect.
    mark = len(output.lines)
    os.kill(pids["nats-server"], signal.SIGKILL)
    output.wait_for(r"^\[supervisor\] started nats-server \(pid \d+\)", 20, after=mark)
    system.wait_ready()
    restarted = output.pids()
    assert restarted["operation-worker"] != pids["operation-worker"]
    assert restarted["nats-server"] != pids["nats-server"]

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert time.monotonic() - started < 30
    survivors = [name for name, pid in restarted.items() if alive(pid)]
    assert not survivors, f"left behind: {survivors}"
