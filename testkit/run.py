"""`holdline run` (what `make run` calls) as a test's child: free ports, data in a temp dir."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from testkit.processes import ROOT, free_port

SERVICES = {
    "interaction-surface": "INTERACTION_SURFACE",
    "sandbox-provider": "SANDBOX_PROVIDER",
    "operation-worker": "OPERATION_WORKER",
    "batch-coordinator": "BATCH_COORDINATOR",
    "delivery-policy": "DELIVERY_POLICY",
}
# The extra processes of `holdline run --cluster N`: name -> the port variable it listens on.
CLUSTER_SERVICES = {
    "interaction-surface-2": "INTERACTION_SURFACE_2",
    "operation-worker-2": "OPERATION_WORKER_2",
    "batch-coordinator-p1": "BATCH_COORDINATOR_P1",
    "delivery-policy-p1": "DELIVERY_POLICY_P1",
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


def alive(pid: int) -> bool:
    """Whether a process still runs (a zombie, exited but not reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@dataclass
class Running:
    """A `holdline run` supervisor, its output and every service's port."""

    proc: subprocess.Popen[str]
    output: Output
    ports: dict[str, int]
    # The environment the supervisor was started with.
    env: dict[str, str] = field(default_factory=dict)

    def operator_credentials(self) -> dict[str, str]:
        """`--cluster`: the operator's broker user (its user, password, inbox prefix and the
        run's CA, as the supervisor wrote them), for a test that reads the cluster's streams."""
        path = Path(self.env["HOLDLINE_ROOT"]) / ".data" / "nats-cluster" / "operator.env"
        pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
        return dict(pairs)

    def url(self, service: str) -> str:
        """A service's base URL."""
        return f"http://127.0.0.1:{self.ports[service]}"

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Until every service answers /readyz with 200."""
        deadline = time.monotonic() + timeout_s
        pending = dict(self.ports)
        while pending and time.monotonic() < deadline:
            for name, port in list(pending.items()):
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                        del pending[name]
            time.sleep(0.1)
        assert not pending, f"not ready: {sorted(pending)}"


@contextlib.contextmanager
def holdline_run(
    root: Path, env: dict[str, str] | None = None, *, cluster: int = 0
) -> Iterator[Running]:
    """Start `holdline run` (`--cluster N` when given) with its data under `root`, on free
    ports; kill what is left on exit."""
    names = [*SERVICES, *(CLUSTER_SERVICES if cluster else ())]
    ports = {name: free_port() for name in names}
    full = {
        **os.environ,
        "NATS_PORT": str(free_port()),
        "HOLDLINE_ROOT": str(root),
        "HOLDLINE_RESTART_BACKOFF_S": "0.2",
        "PYTHONUNBUFFERED": "1",
        # The services run under HOLDLINE_ROOT, not in the checkout: this checkout's code
        # (and its demo package) comes first on their path.
        "PYTHONPATH": str(ROOT),
        # The demo unless the test says otherwise (`"HOLDLINE_DEMO": ""` leaves it unset).
        "HOLDLINE_DEMO": "1",
        **(env or {}),
    }
    full.pop("NATS_URL", None)
    for name, prefix in {**SERVICES, **CLUSTER_SERVICES}.items():
        if name in ports:
            full[f"{prefix}_PORT"] = str(ports[name])
    if cluster:
        full["NATS_PORTS"] = ",".join(str(free_port()) for _ in range(cluster))
        full["NATS_CLUSTER_PORTS"] = ",".join(str(free_port()) for _ in range(cluster))
    full["SANDBOX_PROVIDER_URL"] = f"http://127.0.0.1:{ports['sandbox-provider']}"
    full["HOLDLINE_CALLBACK_URL"] = (
        f"http://127.0.0.1:{ports['operation-worker']}/v1/callbacks/sandbox"
    )
    # `holdline run` as the checkout's own code: the console script imports `libs` through
    # the installed package, which may be another checkout of a shared environment.
    argv = [sys.executable, "-m", "libs.cli", "run"]
    if cluster:
        argv += ["--cluster", str(cluster)]
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = Output(proc)
    try:
        yield Running(proc, output, ports, full)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        for pid in output.pids().values():
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        output.join()
        if proc.stdout is not None:
            proc.stdout.close()
