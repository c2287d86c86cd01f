"""A user's own tools on the real operation plane: the example help-desk API as a real HTTP
server, the file-declared HTTP tools and the `examples.payouts` module, a real worker.

The test process admits through the same `Admission` the surface uses, with a registry built
from the same tool settings as the worker's.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from libs.config import BusSettings, ToolSettings
from testkit.desk import SECRET, TOOLS_FILE, DeskFactory, DeskStack
from testkit.ops_stack import OpsStack
from testkit.processes import ServiceProcess, free_port


@pytest.fixture
async def desk_stack(
    bus_settings: BusSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[DeskFactory]:
    """Start the example API and one worker that loads the examples' tools."""
    started: list[DeskStack] = []

    async def factory(desk_env: dict[str, str] | None = None) -> DeskStack:
        logs = tmp_path / f"desk{len(started)}"
        logs.mkdir()
        desk_port = free_port()
        desk_url = f"http://127.0.0.1:{desk_port}"
        tools = ToolSettings(
            modules=("testkit.tools_plugin", "examples.payouts"), tools_file=str(TOOLS_FILE)
        )
        read_by_tools = {"DESK_API_URL": desk_url, "DESK_WEBHOOK_SECRET": SECRET}
        tool_env = {
            "HOLDLINE_TOOLS_FILE": tools.tools_file,
            "HOLDLINE_TOOL_MODULES": ",".join(tools.modules),
            **read_by_tools,
        }
        for name, value in read_by_tools.items():
            # The in-test admission loads the same tools: the file and the payouts module
            # name these variables themselves, and read them as they load.
            monkeypatch.setenv(name, value)
        # Callbacks come long before the worker would poll: a completion "via callback"
        # proves the executor's own route, not a race.
        worker_env = {**tool_env, "HOLDLINE_CALLBACK_OVERDUE_S": "15"}
        ops = OpsStack(settings=bus_settings, logs=logs, worker_env=worker_env, tools=tools)
        callbacks = f"http://127.0.0.1:{ops.callback_port}/v1/callbacks"
        desk = ServiceProcess(
            "deskapi",
            {
                "DESK_PORT": str(desk_port),
                "DESK_SETTLE_MS": "300",
                "DESK_WEBHOOK_SECRET": SECRET,
                "DESK_REFUND_WEBHOOK_URL": f"{callbacks}/http.refund_order",
                "DESK_PAYOUT_WEBHOOK_URL": f"{callbacks}/payouts",
                **(desk_env or {}),
            },
            desk_port,
            logs / "deskapi.log",
            module="examples.deskapi",
        )
        stack = DeskStack(ops, desk)
        started.append(stack)
        await asyncio.gather(
            asyncio.to_thread(desk.start), ops.start(workers=1, provider=False)
        )
        return stack

    yield factory
    for stack in started:
        await stack.ops.stop()
        await asyncio.to_thread(stack.desk.stop)
