"""The system under chaos: its own broker, every service (two workers), and a proxy.

Every process can be killed, paused, restarted (optionally with a crash point armed) while
the harness keeps its event loop free: blocking process calls run in threads. With
`cluster`, the broker is a three-node JetStream cluster (every stream R3) and its nodes are
among the things that get killed, paused, restarted, and restarted with an empty disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from libs.bus import Context, Topology
from testkit.cluster import Cluster
from testkit.processes import Broker, ServiceProcess, free_port
from testkit.surface import SurfaceStack

from .proxy import TcpProxy

log = logging.getLogger("chaos")

# Longer than the stack's default so a message survives a run of kills and pauses instead
# of dead-lettering; the end checks still count dead letters.
CHAOS_ENV = {"HOLDLINE_MAX_DELIVER": "40"}
# On the cluster: R3, and clients that leave a hung node within ~3 s.
CLUSTER_ENV = {
    "HOLDLINE_STREAM_REPLICAS": "3",
    "HOLDLINE_NATS_PING_INTERVAL_S": "1",
    "HOLDLINE_NATS_RECONNECT_WAIT_S": "0.2",
    "HOLDLINE_APPEND_RETRY_S": "15",
}
ACK_WAIT_S = 2.0
PROXIED = "operation_worker"
SERVICES = (
    "sandbox_provider",
    "operation_worker",
    "operation_worker_2",
    "batch_coordinator",
    "delivery_policy",
    "interaction_surface",
)
_CRASH_ENV = "HOLDLINE_CRASH_POINTS"
_READY_S = 90.0
_WATCH_EVERY_S = 0.3


@dataclass
class ChaosSystem:
    """Broker + services + proxy, with a watchdog that restarts whatever dies."""

    root: Path
    cluster: Cluster | None = None
    broker: Broker = field(init=False)
    stack: SurfaceStack = field(init=False)
    proxy: TcpProxy = field(init=False)
    # Processes the harness is acting on right now (the watchdog leaves them alone).
    busy: set[str] = field(default_factory=set)
    # Crash point armed per service, until it fires or the faults stop.
    armed: dict[str, str] = field(default_factory=dict)
    fired: Counter[str] = field(default_factory=Counter)
    unexpected_exits: Counter[str] = field(default_factory=Counter)
    _watch: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        logs = self.root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        if self.cluster is not None:
            # The proxied worker reaches node 0 through the proxy (and finds the others).
            self.broker = self.cluster.nodes[0]
        else:
            self.broker = Broker(store=self.root / "nats" / "store")
        self.proxy = TcpProxy(self.broker.port)
        self.stack = SurfaceStack(
            nats_url=self.nats_url,
            prefix=f"c{uuid.uuid4().hex[:10]}",
            logs=logs,
            env={**CHAOS_ENV, **(CLUSTER_ENV if self.cluster is not None else {})},
        )

    @property
    def nats_url(self) -> str:
        """What clients are given: the broker, or every node's URL."""
        return self.cluster.url if self.cluster is not None else self.broker.url

    @property
    def nodes(self) -> list[Broker]:
        """Every broker process (one, or the cluster's nodes)."""
        return self.cluster.nodes if self.cluster is not None else [self.broker]

    @property
    def procs(self) -> dict[str, ServiceProcess]:
        """Every service process by name."""
        return self.stack.procs

    async def start(self) -> None:
        """Broker, proxy, the stack; then the proxied worker and a second worker."""
        if self.cluster is not None:
            await asyncio.to_thread(self.cluster.start)
            await self.cluster.wait_meta_leader()
        else:
            await asyncio.to_thread(self.broker.start)
        await self.proxy.start()
        await asyncio.to_thread(self.stack.start)
        first = self.procs[PROXIED]
        port = free_port()
        self.procs["operation_worker_2"] = ServiceProcess(
            "operation_worker",
            {**first.env, "OPERATION_WORKER_PORT": str(port)},
            port,
            self.stack.logs / "operation_worker_2.log",
        )
        # The stack starts every service on the broker; the first worker moves behind the proxy.
        first.env = {**first.env, "NATS_URL": self.proxy.url}
        await asyncio.gather(self.restart(PROXIED), self.restart("operation_worker_2"))
        self._watch = asyncio.create_task(self._watchdog())

    async def stop(self) -> None:
        """Kill everything this system started."""
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        for proc in self.procs.values():
            proc.resume()
        await asyncio.to_thread(self.stack.stop)
        await self.proxy.stop()
        for node in self.nodes:
            await asyncio.to_thread(node.stop)

    async def restart(self, name: str, crash_point: str | None = None) -> None:
        """kill -9 (if running) and start again; with a crash point armed when given."""
        proc = self.procs[name]
        self.busy.add(name)
        try:
            await asyncio.to_thread(proc.kill9)
            env = {k: v for k, v in proc.env.items() if k != _CRASH_ENV}
            if crash_point:
                env[_CRASH_ENV] = crash_point
                self.armed[name] = crash_point
            else:
                self.armed.pop(name, None)
            proc.env = env
            # An armed process may die before it is ready: the watchdog handles that.
            await asyncio.to_thread(proc.start, wait_ready=False)
            if not crash_point:
                await asyncio.to_thread(proc.wait_ready, _READY_S)
        finally:
            self.busy.discard(name)

    async def restart_broker(self, down_s: float) -> None:
        """kill -9 the broker, leave it down a moment, start it on the same store."""
        self.busy.add("broker")
        try:
            await asyncio.to_thread(self.broker.kill9)
            await asyncio.sleep(down_s)
            await asyncio.to_thread(self.broker.start)
        finally:
            self.busy.discard("broker")

    async def node_fault(
        self, index: int, *, kill: bool, down_s: float, empty_disk: bool = False
    ) -> None:
        """One cluster node: kill -9 or stopped (SIGTERM, a graceful restart), down for a
        moment, started again on its store or on an empty one."""
        node = self.nodes[index]
        self.busy.add("broker")
        try:
            await asyncio.to_thread(node.kill9 if kill else node.stop)
            if empty_disk:
                await asyncio.to_thread(shutil.rmtree, node.store, True)
            await asyncio.sleep(down_s)
            await asyncio.to_thread(node.start)
            # The next node fault waits until this one has caught up: two nodes without the
            # newest entries at once would be a fault the cluster is not built to survive.
            await self.settled()
        finally:
            self.busy.discard("broker")

    async def settled(self, timeout_s: float = 90.0) -> None:
        """Every stream led, with all replicas current (no-op on a single broker)."""
        if self.cluster is None:
            return
        topology = Topology(self.stack.prefix)
        for context in Context:
            with contextlib.suppress(AssertionError):
                await self.cluster.stream_info(topology.stream_name(context), timeout_s=timeout_s)

    async def pause_node(self, index: int, seconds: float) -> None:
        """SIGSTOP of one node for `seconds` (past the election timeout if long), SIGCONT."""
        node = self.nodes[index]
        self.busy.add("broker")
        try:
            node.pause()
            await asyncio.sleep(seconds)
            node.resume()
            await self.settled()
        finally:
            node.resume()
            self.busy.discard("broker")

    async def pause(self, name: str, seconds: float) -> None:
        """SIGSTOP for `seconds`, then SIGCONT."""
        proc = self.procs[name]
        self.busy.add(name)
        try:
            proc.pause()
            await asyncio.sleep(seconds)
        finally:
            proc.resume()
            self.busy.discard(name)

    async def disarm(self) -> None:
        """Restart every service still carrying an armed crash point, without it."""
        await asyncio.gather(*(self.restart(name) for name in list(self.armed)))

    async def all_ready(self) -> None:
        """Restart anything down, then wait until every service answers /readyz."""
        for name, proc in self.procs.items():
            if proc.proc is None or proc.proc.poll() is not None:
                await self.restart(name)
        for proc in self.procs.values():
            await asyncio.to_thread(proc.wait_ready, _READY_S)

    async def _watchdog(self) -> None:
        # Bounded by cancellation in `stop`; one pass per tick.
        while True:
            await asyncio.sleep(_WATCH_EVERY_S)
            for node in self.nodes:
                broker = node.proc
                if "broker" not in self.busy and broker is not None and broker.poll() is not None:
                    self.unexpected_exits["broker"] += 1
                    await asyncio.to_thread(node.start)
            for name, proc in list(self.procs.items()):
                if name in self.busy or proc.proc is None or proc.proc.poll() is None:
                    continue
                point = self.armed.get(name)
                if point is not None:
                    self.fired[point] += 1
                    log.info("crash point %s fired in %s", point, name)
                else:
                    self.unexpected_exits[name] += 1
                    log.warning("%s exited on its own:\n%s", name, proc.tail(15))
                try:
                    await self.restart(name)
                except (RuntimeError, TimeoutError) as exc:
                    log.warning("restarting %s failed, retrying: %s", name, exc)
