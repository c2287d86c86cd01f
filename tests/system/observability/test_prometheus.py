"""Every Grafana panel's PromQL, evaluated by a real Prometheus scraping the running system.

`holdline run` (what `make run` starts) and `holdline run --cluster 3` (`make run-cluster`)
run on free ports; Debian's Prometheus scrapes them with the checked-in local config, its
targets rendered to those ports. After the scripted conversation of test_metrics (a retry, a
cancellation, a handoff, a confirmation, a closing that waits for the next turn) every query
of every panel (deploy/grafana/build.py) must evaluate without error, and every panel that
such a conversation moves must return data. The cluster run also proves the supervisor's
rules for broker nodes: a killed node is started again, and SIGTERM stops everything.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
import os
import signal
import ssl
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import nats
import pytest

from libs.bus import Context, Topology
from testkit.prometheus import CLUSTER_CONFIG, LOCAL_CONFIG, Prometheus, render
from testkit.run import Running, alive, holdline_run
from testkit.surface import COMMON_ENV, eventually, open_chat

from .test_metrics import (
    _batch_with_a_retry,
    _cancel_a_booking,
    _confirmed_transfer,
    _handoff_while_pending,
    _next_turn,
)

BUILD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "build.py"
TURNS = 2 + 2 + 1 + 2 + 2
# Panels a chat conversation cannot move: the voice path (a phone call), and counters that
# only faults this conversation does not inject would start (their series do not exist yet).
QUIET = frozenset({
    "Barge-in p95",
    "Speech stop → acceptance audio",
    "Barge-in (voiced frame → clear)",
    "Generated → played gap",
    "Delivery ready → first audio",
    "Calls by outcome",
    "Media Streams frames rejected by reason",
    "UNKNOWN (range)",
    "UNKNOWN by tool",
    "Dead letters (range)",
    "Dead letters by stream and reason",
    "Backpressure rejections (range)",
    "Backpressure rejections by tool",
    "Timeouts by tool and phase",
    "Compensations by tool",
    "Provider callbacks by outcome",
})
VARIABLES = {"$namespace": ".*", "$tool": ".*", "$__range": "5m"}


def _build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_build", BUILD)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grafana_build"] = module
    spec.loader.exec_module(module)
    return module


def panels() -> list[tuple[str, str, list[str]]]:
    """(dashboard uid, panel title, PromQL with the variables filled) for every panel."""
    build = _build()
    found = []
    for make in (build.latency_dashboard, build.operations_dashboard, build.truthfulness_dashboard):
        dashboard = make()
        for item in dashboard.items:
            if isinstance(item, build.Panel):
                exprs = []
                for target in item.targets:
                    expr = target.expr
                    for name, value in VARIABLES.items():
                        expr = expr.replace(name, value)
                    exprs.append(expr)
                found.append((dashboard.uid, item.title, exprs))
    return found


@dataclass
class _Surface:
    """What test_metrics' conversation helpers use of a stack."""

    url: str
    provider_url: str


async def _conversation(running: Running, surface: str) -> None:
    stack = _Surface(running.url(surface), running.url("sandbox-provider"))
    async with httpx.AsyncClient(base_url=stack.url, timeout=20.0) as client:
        chats = [
            await open_chat(client, user=f"user-{uuid.uuid4().hex[:12]}",
                            agent="sales" if i == 2 else None)
            for i in range(5)
        ]
        await asyncio.gather(
            _batch_with_a_retry(chats[0], stack),  # type: ignore[arg-type]
            _cancel_a_booking(chats[1], stack),  # type: ignore[arg-type]
            _handoff_while_pending(chats[2], stack),  # type: ignore[arg-type]
            _confirmed_transfer(chats[3]),
            _next_turn(chats[4], stack),  # type: ignore[arg-type]
        )


def _has_data(answer: dict[str, Any]) -> bool:
    result = answer["data"]["result"]
    if answer["data"]["resultType"] == "scalar":
        return math.isfinite(float(result[1]))
    return any(math.isfinite(float(sample["value"][1])) for sample in result)


def _targets(running: Running, cluster: bool) -> dict[str, list[str]]:
    def at(name: str) -> str:
        return f"127.0.0.1:{running.ports[name]}"

    if not cluster:
        return {name: [at(name)] for name in running.ports}
    return {
        "interaction-surface": [at("interaction-surface"), at("interaction-surface-2")],
        "sandbox-provider": [at("sandbox-provider")],
        "operation-worker": [at("operation-worker"), at("operation-worker-2")],
        "batch-coordinator": [at("batch-coordinator"), at("batch-coordinator-p1")],
        "delivery-policy": [at("delivery-policy"), at("delivery-policy-p1")],
    }


async def _replicas(running: Running) -> set[int]:
    urls = [f"nats://127.0.0.1:{p}" for p in running.env["NATS_PORTS"].split(",")]
    # The cluster has one user per service and TLS: the operator's user may read every
    # stream's settings.
    creds = running.operator_credentials()
    nc = await nats.connect(
        servers=urls, user=creds["NATS_USER"], password=creds["NATS_PASSWORD"],
        inbox_prefix=creds["HOLDLINE_NATS_INBOX_PREFIX"],
        tls=ssl.create_default_context(cafile=creds["NATS_TLS_CA"]),
    )
    try:
        js = nc.jetstream()
        topology = Topology(running.env.get("HOLDLINE_PREFIX") or "hl")
        found = set()
        for context in Context:
            info = await js.stream_info(topology.stream_name(context))
            found.add(int(info.config.num_replicas or 1))
        return found
    finally:
        await nc.close()


def _supervisor_rules_for_nodes(running: Running) -> None:
    """A killed node comes back; SIGTERM stops every child, nodes last, within 30 s."""
    pids = running.output.pids()
    assert {"nats-server-0", "nats-server-1", "nats-server-2"} <= set(pids)
    mark = len(running.output.lines)
    os.kill(pids["nats-server-1"], signal.SIGKILL)
    running.output.wait_for(r"^\[supervisor\] started nats-server-1 \(pid \d+\)", 30, after=mark)
    running.wait_ready(60)
    restarted = running.output.pids()
    started = time.monotonic()
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(timeout=30) == 0
    assert time.monotonic() - started < 30
    left = [name for name, pid in restarted.items() if alive(pid)]
    assert not left, f"left behind: {left}"


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("cluster", [0, 3], ids=["single-node", "cluster"])
def test_every_panel_query_runs_on_a_real_prometheus(tmp_path: Path, cluster: int) -> None:
    env = {**COMMON_ENV, "HOLDLINE_TURN_PHASES": "1", "HOLDLINE_DELIVERY_WINDOW_MS": "1500"}
    with holdline_run(tmp_path / "run", env, cluster=cluster) as running:
        # Prometheus starts with the system (its first scrapes wait for target discovery).
        targets = _targets(running, bool(cluster))
        config = render(CLUSTER_CONFIG if cluster else LOCAL_CONFIG, targets)
        prometheus = Prometheus(tmp_path / "prometheus", config)
        prometheus.start()
        try:
            running.output.wait_for(r"services ready", 90)
            running.wait_ready(30)
            # Every target scraped once before the conversation, so rates see it move.
            want = sum(len(t) for t in targets.values())
            asyncio.run(eventually_sync(lambda: _all_up(prometheus, want), 30))
            if cluster:
                assert asyncio.run(_replicas(running)) == {3}
            asyncio.run(_conversation(running, "interaction-surface-2" if cluster else
                                      "interaction-surface"))
            # Scraped after the conversation: every turn is counted.
            asyncio.run(eventually_sync(lambda: _counted(prometheus), 30))
            results = {}
            for uid, title, exprs in panels():
                answers = [prometheus.query(expr) for expr in exprs]
                errors = [(e, a.get("error")) for e, a in zip(exprs, answers, strict=True)
                          if a["status"] != "success"]
                assert not errors, f"{uid} / {title}: {errors}"
                results[title] = any(_has_data(a) for a in answers)
            empty = sorted(t for t, ok in results.items() if not ok and t not in QUIET)
            assert not empty, f"panels the conversation moves returned no data: {empty}"
        finally:
            prometheus.stop()
        if cluster:
            _supervisor_rules_for_nodes(running)


def _all_up(prometheus: Prometheus, count: int) -> bool | None:
    up = prometheus.targets_up()
    return (len(up) == count and all(up.values())) or None


def _counted(prometheus: Prometheus) -> bool | None:
    answer = prometheus.query("sum(holdline_acceptance_seconds_count)")
    result = answer["data"]["result"]
    return (bool(result) and float(result[0]["value"][1]) >= TURNS) or None


async def eventually_sync(probe: Any, timeout_s: float) -> Any:
    """`eventually` for a blocking probe (run in a thread, the loop stays free)."""
    return await eventually(lambda: asyncio.to_thread(probe), timeout_s=timeout_s, every_s=0.5)
