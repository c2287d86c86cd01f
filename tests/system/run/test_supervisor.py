"""`holdline run` (what `make run` calls): all up, the dead restarted, all stopped cleanly."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from libs.supervisor import EXIT_CONFIG, broker_environ
from testkit.run import SERVICES, Running, alive, holdline_run


def _environ(pid: int) -> dict[str, str]:
    """A running process's environment, as the kernel holds it."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().partition("=")[::2] for item in raw if b"=" in item)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "1"),
        ({"HOLDLINE_BROKER_GOMAXPROCS": "2"}, "2"),
        ({"HOLDLINE_BROKER_GOMAXPROCS": "0"}, None),
        ({"GOMAXPROCS": "4"}, "4"),
        ({"GOMAXPROCS": "4", "HOLDLINE_BROKER_GOMAXPROCS": "1"}, "4"),
    ],
)
def test_broker_environment_sets_one_go_processor_unless_told(
    environ: dict[str, str], expected: str | None
) -> None:
    env = broker_environ({"PATH": "/usr/bin", **environ})
    assert env.get("GOMAXPROCS") == expected
    assert env["PATH"] == "/usr/bin"


def test_broker_environment_refuses_a_processor_count_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="HOLDLINE_BROKER_GOMAXPROCS"):
        broker_environ({"HOLDLINE_BROKER_GOMAXPROCS": "two"})


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"HOLDLINE_BROKER_GOMAXPROCS": "two"}, "HOLDLINE_BROKER_GOMAXPROCS"),
        ({"NATS_PORT": "four"}, "NATS_PORT"),
    ],
)
def test_run_refuses_bad_settings_in_one_line_with_exit_78(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    with holdline_run(tmp_path, env) as running:
        assert running.proc.wait(timeout=30) == EXIT_CONFIG
        running.output.join()
        lines = running.output.lines
    assert len(lines) == 1, lines
    assert lines[0].startswith("[supervisor] refusing to start: "), lines
    assert named in lines[0]
    # Nothing was started: no broker store, no child.
    assert not (tmp_path / ".data").exists()


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
    # The co-located broker runs on one Go processor (libs.supervisor.broker_environ), the
    # services on their own environment.
    assert _environ(pids["nats-server"]).get("GOMAXPROCS") == os.environ.get("GOMAXPROCS", "1")
    assert _environ(pids["operation-worker"]).get("GOMAXPROCS") == os.environ.get("GOMAXPROCS")
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
