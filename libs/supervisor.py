"""Runs the whole system in the foreground: the embedded broker and one process per service.

Each child's output is prefixed with its name; a child that dies is started again after a
short, growing backoff (the broker included); SIGINT/SIGTERM stops everything within the
stop timeout, services first so they can drain, the broker last.

What runs, with which command line and environment, is planned by `libs/process_table.py`
(`ProcessTable`); this module is the run loop over it. `--cluster N` (`make run-cluster`) is
scale-out on one machine (N broker nodes, two of each service, the table says how); the same
rules apply to every child, nodes included.
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
from collections.abc import Mapping
from pathlib import Path

import httpx

from libs import modes
from libs.config import env_float
from libs.process_table import SERVICES, Child, ProcessTable, broker_environ

# The table's names that callers of `holdline run`'s module use (tests, benchmarks).
__all__ = [
    "EXIT_CONFIG", "SERVICES", "Child", "ProcessTable", "Supervisor", "broker_environ", "main"
]

# A child exiting with this (sysexits' EX_CONFIG, see libs/serve.py) refused its
# configuration: it would refuse it again, so it is not restarted and everything stops.
EXIT_CONFIG = 78

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


class Supervisor:
    """Starts, watches, restarts and stops the children of its `ProcessTable`.

    `environ` is the supervisor's environment, read once by `main`: its own settings come
    from it, and every child's environment is planned from it.
    """

    def __init__(self, root: Path, environ: Mapping[str, str], cluster: int = 0) -> None:
        self.root = root
        self.environ = dict(environ)
        self.cluster = cluster
        self.table = ProcessTable(root, self.environ, cluster)
        self.stopping = asyncio.Event()
        # HOLDLINE_RESTART_BACKOFF_S: first wait before a crashed child is restarted; doubles while
        # it keeps dying right away, capped at 10 s.
        self.backoff_s = env_float("HOLDLINE_RESTART_BACKOFF_S", 0.5, self.environ)
        # HOLDLINE_STOP_TIMEOUT_S: how long stopping children may take before they are killed.
        self.stop_timeout_s = env_float("HOLDLINE_STOP_TIMEOUT_S", 20.0, self.environ)
        self.exit_code = 0

    @property
    def children(self) -> list[Child]:
        """The services' processes (planned by the table)."""
        return self.table.children

    @property
    def brokers(self) -> list[Child]:
        """The broker nodes' processes (none with an external `NATS_URL`)."""
        return self.table.brokers

    @property
    def demo(self) -> bool:
        """Whether this run is the demo (decided by the plan)."""
        return self.table.demo

    def plan(self) -> None:
        """Decide every child's command line and environment (ValueError: refused)."""
        self.table.plan()

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
                    uis = [
                        (c.ready_url or "").removesuffix("readyz")
                        for c in self.children
                        if c.name.startswith("interaction-surface")
                    ]
                    more = "".join(f" (or {ui}, the same sessions)" for ui in uis[1:])
                    nodes = f" on {len(self.brokers)} broker nodes" if self.cluster else ""
                    what = "the demo" if self.demo else "the surface"
                    _log(f"all {len(urls)} services ready{nodes}. Open {what} at {uis[0]}{more}")
                    return
                await asyncio.sleep(0.2)
        _log("services did not all become ready within 120 s; see their logs above")

    async def run(self) -> int:
        """Run until SIGINT/SIGTERM; returns the exit code."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.stopping.set)
        if not self.children:
            self.plan()
        _log(modes.describe(self.environ))
        watchers = [asyncio.create_task(self._watch(b)) for b in self.brokers]
        for broker, port in zip(self.brokers, self.table.broker_ports, strict=True):
            if not await self._wait_port(port, 20.0):
                _log(f"{broker.name} did not open its port {port} within 20 s")
        watchers += [asyncio.create_task(self._watch(c)) for c in self.children]
        announce = asyncio.create_task(self._announce_when_ready())
        await self.stopping.wait()
        announce.cancel()
        _log("stopping")
        await self._terminate(list(self.children), self.stop_timeout_s)
        if self.brokers:
            await self._terminate(self.brokers, 5.0)
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


def main(cluster: int = 0) -> int:
    """Entry point of `holdline run` (`--cluster N`: N broker nodes and two of each service)."""
    # The one read of the supervisor's environment: settings and children's come from it.
    environ = dict(os.environ)
    # HOLDLINE_ROOT: the directory the services run in and keep `.data/` (the broker's store)
    # under; default: the current directory.
    root = Path(environ.get("HOLDLINE_ROOT", Path.cwd()))
    if cluster and environ.get("NATS_URL"):
        _log("--cluster starts its own broker nodes: unset NATS_URL, or run without --cluster")
        return 2
    try:
        supervisor = Supervisor(root, environ, cluster)
        supervisor.plan()  # before the loop, so bad settings fail here
    except ValueError as exc:
        # A refused configuration, like a child's: one line and EX_CONFIG, no traceback,
        # because running again with the same environment would be refused again.
        _log(f"refusing to start: {exc}")
        return EXIT_CONFIG
    return asyncio.run(supervisor.run())
