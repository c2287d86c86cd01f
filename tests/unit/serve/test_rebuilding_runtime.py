"""A service that folds the streams at start (the coordinator, the policy) is not ready until
its projections are rebuilt; then the usual checks answer (`libs.service.RebuildingRuntime`)."""

from __future__ import annotations

from libs.config import BusSettings
from libs.service import RebuildingRuntime


async def test_not_ready_while_rebuilding_then_the_usual_checks_answer() -> None:
    runtime = RebuildingRuntime(name="svc", settings=BusSettings(prefix="fast"), publishes=())
    assert await runtime.readiness() == (False, "rebuilding projections")
    runtime.rebuilt.set()
    # No broker in a unit test: the runtime's own check says so.
    assert await runtime.readiness() == (False, "broker not connected")


async def test_a_declaration_problem_is_said_before_the_rebuild() -> None:
    runtime = RebuildingRuntime(name="svc", settings=BusSettings(prefix="fast"), publishes=())
    runtime.declare_problem = "stream X has 1 replica(s)"
    assert await runtime.readiness() == (False, "stream X has 1 replica(s)")
