"""Fixtures for the operation plane: a running provider and workers per test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libs.config import BusSettings
from testkit.ops_stack import OpsStack, StackFactory


@pytest.fixture
async def make_stack(bus_settings: BusSettings, tmp_path: Path) -> AsyncIterator[StackFactory]:
    """Start a stack with the given worker count and environments; stopped after the test."""
    stacks: list[OpsStack] = []

    async def factory(
        workers: int = 2,
        worker_env: dict[str, str] | None = None,
        provider_env: dict[str, str] | None = None,
    ) -> OpsStack:
        logs = tmp_path / f"stack{len(stacks)}"
        logs.mkdir()
        stack = OpsStack(
            settings=bus_settings,
            logs=logs,
            worker_env=worker_env or {},
            provider_env=provider_env or {},
        )
        stacks.append(stack)
        await stack.start(workers)
        return stack

    yield factory
    for stack in stacks:
        await stack.stop()
