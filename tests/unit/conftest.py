"""The unit lane: every test here is `fast` and none may start a broker or a service."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from testkit import unit_lane
from testkit.processes import Broker, ServiceProcess

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    unit_lane.mark_fast(items, HERE)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    count = unit_lane.ran(terminalreporter, HERE)
    if count:
        terminalreporter.write_line(f"fast lane: {count} unit tests ran, no broker")


@pytest.fixture(scope="session")
def broker() -> NoReturn:
    """Refused here: the run's broker is for tests/component and tests/system."""
    unit_lane.refuse()


@pytest.fixture(autouse=True)
def _no_broker_or_service(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker or service started by hand fails the test too."""
    monkeypatch.setattr(Broker, "start", unit_lane.refuse)
    monkeypatch.setattr(ServiceProcess, "start", unit_lane.refuse)
