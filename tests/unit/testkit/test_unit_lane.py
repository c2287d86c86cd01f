"""The unit lane refuses a broker or a service, and marks what it holds `fast`."""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.processes import Broker, ServiceProcess
from testkit.unit_lane import UnitLaneViolation


def test_a_broker_started_in_a_unit_test_fails_it(tmp_path: Path) -> None:
    with pytest.raises(UnitLaneViolation, match="tests/component"):
        Broker(store=tmp_path / "store").start()


def test_a_service_started_in_a_unit_test_fails_it(tmp_path: Path) -> None:
    service = ServiceProcess(
        package="operation_worker", env={}, port=1, log_path=tmp_path / "worker.log"
    )
    with pytest.raises(UnitLaneViolation):
        service.start()


def test_the_broker_fixture_is_refused(request: pytest.FixtureRequest) -> None:
    with pytest.raises(UnitLaneViolation):
        request.getfixturevalue("broker")


def test_every_unit_test_is_fast(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("fast") is not None
