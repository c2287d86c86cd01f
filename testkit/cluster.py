"""A JetStream cluster for tests: N nats-server nodes from the wheel, routed on loopback.

Each node has its own free client and route port, a server name and a store; any node can
be killed, paused, restarted on its store, or restarted with an empty disk. Which node leads
a stream is asked through the JetStream API (stream info), as an operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import nats
from nats.aio.client import Client

from .processes import Broker, free_port

CLUSTER_NAME = "holdline-test"
# Routes to a paused node (sockets open, nothing answered) are dropped after two missed
# pings; with the default two minutes its subscriptions would keep receiving requests.
NODE_CONFIG = 'ping_interval: "2s"\nping_max: 2\n'


@dataclass
class Cluster:
    """N routed nodes; `url` is the comma-separated seed list clients are given."""

    root: Path
    size: int = 3
    nodes: list[Broker] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    # Each node's HTTP monitoring port (/varz, /connz, /jsz).
    monitor_ports: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        routes = [free_port() for _ in range(self.size)]
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "node.conf"
        config.write_text(NODE_CONFIG)
        seeds = ",".join(f"nats://127.0.0.1:{p}" for p in routes)
        for i, route in enumerate(routes):
            name = f"n{i}"
            self.names.append(name)
            self.monitor_ports.append(free_port())
            self.nodes.append(
                Broker(
                    store=self.root / name / "store",
                    args=(
                        "-c", str(config),
                        "-n", name,
                        "--cluster_name", CLUSTER_NAME,
                        "--cluster", f"nats://127.0.0.1:{route}",
                        "--routes", seeds,
                        "-m", str(self.monitor_ports[-1]),
                    ),
                )
            )

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what NATS_URL carries)."""
        return ",".join(node.url for node in self.nodes)

    @property
    def servers(self) -> list[str]:
        """Every node's client URL."""
        return [node.url for node in self.nodes]

    @property
    def live(self) -> list[str]:
        """The client URLs of the nodes that run and are not paused (a test's own reads
        go there: a paused node accepts a connection and never completes it)."""
        return [node.url for node in self.nodes if node.running] or self.servers

    async def connect(self) -> Client:
        """A quiet connection to a live node, for the test's own reads."""
        return await nats.connect(
            servers=self.live, connect_timeout=2, error_cb=_quiet, max_reconnect_attempts=2,
        )

    def heal(self) -> None:
        """Resume paused nodes and start dead ones: the next test starts from three."""
        for node in self.nodes:
            node.resume()
            if node.proc is None or node.proc.poll() is not None:
                node.start()

    def node(self, name: str) -> Broker:
        """The node with that server name."""
        return self.nodes[self.names.index(name)]

    def monitor_url(self, name: str) -> str:
        """The node's monitoring base URL."""
        return f"http://127.0.0.1:{self.monitor_ports[self.names.index(name)]}"

    def start(self) -> None:
        """Start every node (each waits for its client port)."""
        for node in self.nodes:
            node.start()

    async def wait_meta_leader(self, timeout_s: float = 30.0) -> None:
        """Until the cluster answers JetStream API calls (a meta leader was elected)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                nc = await self.connect()
                try:
                    await nc.jetstream(timeout=2).account_info()
                    return
                finally:
                    await nc.close()
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.2)

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    def restart(self, name: str, *, empty_disk: bool = False) -> None:
        """Start a stopped or killed node again, on its store or on an empty one."""
        node = self.node(name)
        node.kill9()
        if empty_disk:
            shutil.rmtree(node.store, ignore_errors=True)
        node.start()

    def pid(self, name: str) -> int:
        """The node's process id."""
        proc = self.node(name).proc
        assert proc is not None
        return proc.pid

    async def leader(self, stream: str, *, timeout_s: float = 30.0) -> str:
        """The server name leading a stream right now (waits through an election)."""
        info = await self.stream_info(stream, timeout_s=timeout_s, settled=False)
        assert info.cluster is not None
        assert info.cluster.leader is not None
        return info.cluster.leader

    async def stream_info(
        self, stream: str, *, timeout_s: float = 30.0, settled: bool = True
    ) -> nats.js.api.StreamInfo:
        """Stream info from any live node, once it has a leader (and, when `settled`,
        every replica is current)."""
        deadline = time.monotonic() + timeout_s
        last: object = None
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                nc = await self.connect()
                try:
                    info = await nc.jetstream(timeout=2).stream_info(stream)
                finally:
                    await nc.close()
                last = info.cluster
                peers = info.cluster.replicas if info.cluster else None
                if info.cluster is not None and info.cluster.leader:
                    current = all(p.current and not p.offline for p in peers or [])
                    if not settled or (current and len(peers or []) == self.size - 1):
                        return info
            await asyncio.sleep(0.2)
        raise AssertionError(f"stream {stream} not led/caught up in {timeout_s}s: {last!r}")


async def _quiet(_exc: Exception) -> None:
    # A node the test killed refuses connections; that is the point, not news.
    return
