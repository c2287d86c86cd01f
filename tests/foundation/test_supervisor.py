"""`holdline run` (what `make run` calls): all up, the dead restarted, all stopped cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import ROOT, free_port

SERVICES = {
    "interaction-surface": "INTERACTION_SURFACE",
    "sandbox-provider": "SANDBOX_PROVIDER",
    "operation-worker": "OPERATION_WORKER",
    "batch-coordinator": "BATCH_COORDINATOR",
    "delivery-policy": "DELIVERY_POLICY",
}
_STARTED = re.compile(r"^\[supervisor\] started (?P<name>[\w-]+) \(pid (?P<pid>\d+)\)")


class Output:
    """Collects the supervisor's output lines from a reader thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._lock:
                self.lines.append(line.rstrip("\n"))

    def join(self) -> None:
        """Wait for the reader to reach end of output."""
        self._thread.join(timeout=10)

    def wait_for(self, pattern: str, timeout_s: float, *, after: int = 0) -> int:
        """Index of the first line from `after` on that matches; fails after the timeout."""
        deadline = time.monotonic() + timeout_s
        regex = re.compile(pattern)
        while time.monotonic() < deadline:
            with self._lock:
                for i in range(after, len(self.lines)):
                    if regex.search(self.lines[i]):
                        return i
            time.sleep(0.05)
        raise AssertionError(
            f"no line matching {pattern!r}; last lines:\n" + "\n".join(self.lines[-40:])
        )

    def pids(self) -> dict[str, int]:
        """The latest pid the supervisor reported for each child."""
        found: dict[str, int] = {}
        with self._lock:
            for line in self.lines:
                if m := _STARTED.match(line):
                    found[m["name"]] = int(m["pid"])
        return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.fixture
def system(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Output, dict[str, int]]]:
    """`holdline run` on free ports with its data in a temp dir."""
    ports = {name: free_port() for name in SERVICES}
    env = {
        **os.environ,
        "NATS_PORT": str(free_port()),
        "HOLDLINE_ROOT": str(tmp_path),
        "HOLDLINE_RESTART_BACKOFF_S": "0.2",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("NATS_URL", None)
    for name, prefix in SERVICES.items():
        env[f"{prefix}_PORT"] = str(ports[name])
    env["SANDBOX_PROVIDER_URL"] = f"http://127.0.0.1:{ports['sandbox-provider']}"
    env["HOLDLINE_CALLBACK_URL"] = (
        f"http://127.0.0.1:{ports['operation-worker']}/v1/callbacks/sandbox"
    )
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "holdline"), "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(proc)
    try:
        yield proc, output, ports
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in output.pids().values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        output.join()
        if proc.stdout is not None:
            proc.stdout.close()


def _all_ready(ports: dict[str, int]) -> None:
    deadline = time.monotonic() + 30
    pending = dict(ports)
    while pending and time.monotonic() < deadline:
        for name, port in list(pending.items()):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    del pending[name]
            except httpx.HTTPError:
                pass
        time.sleep(0.1)
    assert not pending, f"not ready: {sorted(pending)}"


@pytest.mark.timeout(120)
def test_run_starts_everything_restarts_the_dead_and_stops_cleanly(
    system: tuple[subprocess.Popen[str], Output, dict[str, int]], tmp_path: Path
) -> None:
    proc, output, ports = system
    output.wait_for(r"all 5 services ready\. Open the demo at http://127\.0\.0\.1:\d+/", 60)
    _all_ready(ports)
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
    _all_ready(ports)
    restarted = output.pids()
    assert restarted["operation-worker"] != pids["operation-worker"]
    assert restarted["nats-server"] != pids["nats-server"]

    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert time.monotonic() - started < 30
    survivors = [name for name, pid in restarted.items() if _alive(pid)]
    assert not survivors, f"left behind: {survivors}"
