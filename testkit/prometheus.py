"""A real Prometheus (Debian's, installed by scripts/ensure-system-deps.sh) for tests.

`render` takes one of the checked-in local configs (deploy/prometheus/prometheus-local*.yml)
and swaps each target group's addresses, found by its `service` label, for the test's own
ports: everything else the file says (jobs, labels) is what runs. `Prometheus` starts the
server on a free port with its data in a temp dir and answers PromQL through the HTTP API.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from testkit.processes import ROOT, end, free_port

LOCAL_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus-local.yml"
CLUSTER_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus-local-cluster.yml"


def binary() -> str:
    """The prometheus executable (make test installs Debian's package)."""
    found = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not Path(found).exists():
        raise FileNotFoundError("prometheus missing: run scripts/ensure-system-deps.sh")
    return found


def render(
    config: Path, targets: Mapping[str, list[str]], *, scrape_interval: str = "1s"
) -> dict[str, Any]:
    """The config with every target group pointed at `targets[<its service label>]`.

    A group whose service has no entry, or an entry no group uses, is an error: the file and
    the running system must name the same services.
    """
    loaded: dict[str, Any] = yaml.safe_load(config.read_text())
    loaded.setdefault("global", {})
    loaded["global"]["scrape_interval"] = scrape_interval
    loaded["global"]["evaluation_interval"] = scrape_interval
    used: set[str] = set()
    for job in loaded["scrape_configs"]:
        for group in job.get("static_configs", []):
            service = group["labels"]["service"]
            if service not in targets:
                raise KeyError(f"{config.name} scrapes {service}, which the test does not run")
            if len(group["targets"]) != len(targets[service]):
                raise ValueError(
                    f"{config.name} has {len(group['targets'])} {service} targets, "
                    f"the system {len(targets[service])}"
                )
            group["targets"] = list(targets[service])
            used.add(service)
    unused = set(targets) - used
    if unused:
        raise KeyError(f"{config.name} does not scrape {sorted(unused)}")
    return loaded


@dataclass
class Prometheus:
    """One Prometheus server for a test."""

    root: Path
    config: dict[str, Any]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """HTTP base URL."""
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> None:
        """Start and wait until /-/ready."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / "prometheus.yml"
        path.write_text(yaml.safe_dump(self.config))
        with (self.root / "prometheus.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    binary(),
                    f"--config.file={path}",
                    f"--storage.tsdb.path={self.root / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"prometheus not ready: {self.tail()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL."""
        end(self.proc, timeout_s=10)

    def tail(self, lines: int = 20) -> str:
        """The end of the server's log."""
        log = self.root / "prometheus.log"
        if not log.exists():
            return ""
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])

    def targets_up(self) -> dict[str, bool]:
        """Every active target's address and whether its last scrape succeeded."""
        body = httpx.get(f"{self.url}/api/v1/targets", timeout=5).json()
        return {
            t["labels"]["instance"]: t["health"] == "up" for t in body["data"]["activeTargets"]
        }

    def query(self, expr: str) -> dict[str, Any]:
        """An instant query's whole answer (`status`, `data` or `error`)."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10)
        body: dict[str, Any] = response.json()
        return body
