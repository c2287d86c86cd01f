"""Background services yield the CPU to the turn path: their default nice increment."""

from __future__ import annotations

import pytest

from libs.config import BACKGROUND_NICE, BusSettings, ServeSettings
from services.batch_coordinator.settings import Settings as CoordinatorSettings
from services.delivery_policy.settings import Settings as PolicySettings
from services.interaction_surface.settings import Settings as SurfaceSettings
from services.operation_worker.settings import Settings as WorkerSettings


def test_background_services_default_to_a_lower_priority_and_the_surface_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("OPERATION_WORKER_NICE", "BATCH_COORDINATOR_NICE", "DELIVERY_POLICY_NICE",
                 "INTERACTION_SURFACE_NICE"):
        monkeypatch.delenv(name, raising=False)
    assert BACKGROUND_NICE > 0
    assert WorkerSettings.from_env().serve.nice == BACKGROUND_NICE
    assert CoordinatorSettings.from_env().serve.nice == BACKGROUND_NICE
    assert PolicySettings.from_env().serve.nice == BACKGROUND_NICE
    assert SurfaceSettings.from_env().serve.nice == 0


def test_the_increment_is_an_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPERATION_WORKER_NICE", "0")
    assert WorkerSettings.from_env().serve.nice == 0
    monkeypatch.setenv("OPERATION_WORKER_NICE", "19")
    assert WorkerSettings.from_env().serve.nice == 19


@pytest.mark.parametrize("value", ["-1", "20", "low"])
def test_an_increment_out_of_range_is_refused_with_its_name(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("OPERATION_WORKER_NICE", value)
    with pytest.raises(ValueError, match="OPERATION_WORKER_NICE"):
        ServeSettings.from_env("OPERATION_WORKER", 8091, BusSettings.from_env())
