"""Sessions of the Agent API suite read through the typed client, and the test agent's process."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from holdline.client import HoldlineClient, SessionClient
from testkit.surface import eventually

AGENT = Path(__file__).with_name("agent.py")


DAY = "2026-12-24"


def user() -> str:
    """A user id no other test uses."""
    return f"u-{uuid.uuid4().hex[:8]}"


async def session(hl: HoldlineClient, agent: str | None = None) -> SessionClient:
    """A fresh session of tenant acme."""
    return await hl.create_session(user_id=user(), tenant_id="acme", agent=agent)


def delivery(snap: dict[str, Any], batch_id: str | None) -> dict[str, Any]:
    """The batch's final delivery in a snapshot (exactly one)."""
    finals = [
        d for d in snap["deliveries"] if d["batch_id"] == batch_id and d["kind"] == "final"
    ]
    assert len(finals) == 1, snap["deliveries"]
    return finals[0]


async def final_settled(s: SessionClient, batch_id: str | None, *statuses: str) -> dict[str, Any]:
    """The snapshot once the batch's final delivery has one of `statuses`."""

    async def probe() -> dict[str, Any] | None:
        snap = await s.snapshot()
        finals = [
            d for d in snap["deliveries"] if d["batch_id"] == batch_id and d["kind"] == "final"
        ]
        return snap if finals and finals[0]["status"] in statuses else None

    return await eventually(probe, timeout_s=30.0)


async def events(s: SessionClient, kind: str, **ids: str) -> list[dict[str, Any]]:
    """Timeline events of a type, optionally matching ids."""
    timeline = await s.timeline()
    return [
        e for e in timeline["events"]
        if e["type"] == kind and all(e.get(k) == v for k, v in ids.items())
    ]


class AgentProcess:
    """`agent.py` in its own process; its stdout read as JSON event lines."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[dict[str, Any]] = []

    @classmethod
    async def start(
        cls, url: str, s: SessionClient, mode: str, after: int | None = None
    ) -> AgentProcess:
        """Start it and wait until its channel is open."""
        argv = [str(AGENT), url, s.session_id, s.token, mode]
        if after is not None:
            argv.append(str(after))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=asyncio.subprocess.PIPE
        )
        agent = cls(proc)
        ready = await agent.next("ready")
        assert ready["clean"], "the test agent imported holdline's server packages"
        return agent

    async def next(self, event: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """The next line of that event."""
        assert self.proc.stdout is not None
        while True:
            raw = await asyncio.wait_for(self.proc.stdout.readline(), timeout_s)
            if not raw:
                raise AssertionError(f"the agent exited before {event!r}: {self.lines}")
            line = json.loads(raw)
            self.lines.append(line)
            if line["event"] == event:
                return line

    async def kill9(self) -> None:
        """SIGKILL, as a crash would."""
        self.proc.kill()
        await self.proc.wait()
