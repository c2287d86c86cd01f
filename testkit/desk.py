"""The example help-desk API beside a real operation plane: what the tools tests drive."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from testkit.ops_stack import OpsStack
from testkit.processes import ROOT, ServiceProcess

TOOLS_FILE = ROOT / "examples" / "deskapi" / "tools.toml"
SECRET = "desk-test-secret"


@dataclass
class DeskStack:
    """The operation plane plus the example API it calls."""

    ops: OpsStack
    desk: ServiceProcess

    @property
    def desk_url(self) -> str:
        return self.desk.base_url

    @property
    def worker_url(self) -> str:
        return f"http://127.0.0.1:{self.ops.callback_port}"

    async def desk_get(self, path: str) -> Any:
        async with httpx.AsyncClient(base_url=self.desk_url) as client:
            response = await client.get(path)
            response.raise_for_status()
            return response.json()

    async def effects(self, token: str) -> int:
        """Real effects the example API counted under one request token (= operation id)."""
        entries = (await self.desk_get("/ledger"))["entries"]
        return sum(e["effects"] for e in entries if e["request_token"] == token)

    async def all_effects(self) -> int:
        return sum(e["effects"] for e in (await self.desk_get("/ledger"))["entries"])

    async def fault(self, **fault: Any) -> None:
        async with httpx.AsyncClient(base_url=self.desk_url) as client:
            (await client.post("/admin/faults", json=fault)).raise_for_status()


DeskFactory = Callable[..., Awaitable[DeskStack]]
