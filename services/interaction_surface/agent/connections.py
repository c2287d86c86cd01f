"""The agent connections this process holds: one open WebSocket each, the latest per session.

`AgentConnection` writes the server's frames (`holdline/client/frames.py`) and notices its
peer leaving; `AgentRegistry` finds a session's live connection. The close codes are 4000 +
the HTTP status they stand for, or "try again later" for a connection given up elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from fastapi import WebSocket

from holdline.client.frames import ServerFrame, encode

PREFIX = "agent_"
# WebSocket close codes: 4000 + the HTTP status it stands for.
CLOSE_REPLACED = 4409
CLOSE_GONE = 4404
# "Try again later": the client reconnects (and resumes) at once.
CLOSE_RECONNECT = 1013


@dataclass(eq=False)
class AgentConnection:
    """One open agent WebSocket."""

    session_id: str
    connection_id: str
    websocket: WebSocket
    after: int = 0
    closed: bool = False
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The tasks serving it: the executor's watcher of its session, the channel's guard.
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def send(self, frame: ServerFrame) -> bool:
        """Write one frame; False once the socket is gone."""
        if self.closed:
            return False
        async with self.lock:
            try:
                await self.websocket.send_text(encode(frame))
            except Exception:  # noqa: BLE001 - any failure means the peer is gone
                self.closed = True
                return False
        return True

    async def close(self, code: int, reason: str) -> None:
        """Close from the server side (replaced, session gone)."""
        self.closed = True
        with contextlib.suppress(Exception):
            await self.websocket.close(code=code, reason=reason)


@dataclass
class AgentRegistry:
    """The agent connections held by this process: the latest per session."""

    connections: dict[str, AgentConnection] = field(default_factory=dict)
    by_id: dict[str, AgentConnection] = field(default_factory=dict)

    def get(self, session_id: str) -> AgentConnection | None:
        """The live connection of a session, if this process holds it."""
        conn = self.connections.get(session_id)
        return conn if conn is not None and not conn.closed else None

    def held(self, connection_id: str) -> bool:
        """Whether this process holds that connection, open."""
        conn = self.by_id.get(connection_id)
        return conn is not None and not conn.closed

    def attach(self, conn: AgentConnection) -> None:
        """The connection starts carrying its session."""
        self.connections[conn.session_id] = conn
        self.by_id[conn.connection_id] = conn

    def detach(self, conn: AgentConnection) -> None:
        """The connection ended."""
        if self.connections.get(conn.session_id) is conn:
            del self.connections[conn.session_id]
        self.by_id.pop(conn.connection_id, None)
