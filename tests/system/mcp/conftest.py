"""One running system for the MCP suite (two surfaces on the same streams), and the MCP
clients nobody in this project wrote: the `mcp` SDK's and FastMCP's (with fastmcp-tasks)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.processes import Broker
from testkit.surface import SurfaceStack, running_stack


@pytest.fixture(scope="package")
def stack(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SurfaceStack]:
    """Every service as a process, the surface twice (any surface answers any task)."""
    with running_stack(
        broker.url,
        tmp_path_factory.mktemp("mcp"),
        "mc",
        env={"HOLDLINE_TOOL_MODULES": "tests.system.agent_api.tools_plugin"},
        second_surface_env={},
    ) as running:
        yield running
