"""One nats-server per test run, shared by every pytest-xdist worker.

With `-n`, the controller starts the broker before any worker exists and hands its address
to each worker, so the whole run still shares a single nats-server. A run of the unit lane
alone (every path under tests/unit) starts none: nothing there may use one.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.processes import ROOT, Broker

UNIT_TESTS = ROOT / "tests" / "unit"

_SHARED = pytest.StashKey[Broker]()
_BROKER_KEY = "holdline_broker"


def only_unit_tests(config: pytest.Config) -> bool:
    """True when every path the run was given lies under tests/unit."""
    paths = [Path(arg.split("::")[0]) for arg in config.args]
    resolved = [(p if p.is_absolute() else Path(config.invocation_params.dir) / p).resolve()
                for p in paths]
    return bool(resolved) and all(p.is_relative_to(UNIT_TESTS) for p in resolved)


def start_for_workers(config: pytest.Config) -> None:
    """On the xdist controller, start the run's broker before any worker exists."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    if only_unit_tests(config):
        return
    store = Path(tempfile.mkdtemp(prefix="holdline-nats-")) / "store"
    server = Broker(store=store)
    server.start()
    config.stash[_SHARED] = server


def hand_to_worker(node: Any) -> None:
    """Tell a new worker where the shared broker listens."""
    server = node.config.stash.get(_SHARED, None)
    if server is not None:
        where = {"port": server.port, "store": str(server.store)}
        node.workerinput[_BROKER_KEY] = json.dumps(where)


def stop_for_workers(config: pytest.Config) -> None:
    """Stop the broker the controller started."""
    server = config.stash.get(_SHARED, None)
    if server is not None:
        server.stop()
        shutil.rmtree(server.store.parent, ignore_errors=True)


def run_broker(config: pytest.Config, factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """The run's broker: the controller's under xdist (neither started nor stopped here),
    else one started for this process."""
    shared = getattr(config, "workerinput", {}).get(_BROKER_KEY)
    if shared is not None:
        where = json.loads(shared)
        yield Broker(store=Path(where["store"]), port=int(where["port"]))
        return
    server = Broker(store=factory.mktemp("nats") / "store")
    server.start()
    yield server
    server.stop()
