"""`WS /v1/sessions/{id}/agent`: the agent's WebSocket (docs/contract.md §6b).

Frames in: `signal` and `delivery.ack` (as the HTTP bodies, plus `type`). Out: `hello` once
the connection is recorded, `delivery.say` (pushed by the agent channel), `delivery.acked`
confirming each ack, and `error` `{code, status, detail, delivery_id?, ack_status?}` for a
frame refused (the connection stays open; nothing of a refused frame is stored). Frames and
connects take the session's and tenant's write tokens as the HTTP routes do: over the rate,
a frame gets an `error` frame `rate_limited` (429) and a connect is denied with 429. While the
socket is open the delivery executor watches its session, so a closing handed over on
another surface is pushed here.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
from fastapi import APIRouter, WebSocket
from starlette.websockets import WebSocketDisconnect

from holdline.client.frames import CLIENT_FRAME, AckedFrame, ErrorFrame, HelloFrame, SignalFrame
from libs.domain import SessionState
from libs.problems import problem

from ..core.http import ProblemError, deny
from ..core.sockets import SocketAuth
from .acks import AckRefused
from .connections import AgentConnection
from .routes import AgentApi


def add_agent_socket(router: APIRouter, api: AgentApi, sockets: SocketAuth) -> None:
    """The agent's WebSocket route."""

    @router.websocket("/v1/sessions/{session_id}/agent")
    async def agent(websocket: WebSocket, session_id: str) -> None:
        admitted = await sockets.admit(websocket, session_id, _after)
        if admitted is None:
            return
        state, after = admitted
        if state.closed:
            await deny(websocket, problem(409, "Conflict", "the session is closed"))
            return
        try:
            # A connect appends the connection's record: it takes a write's tokens.
            api.surface.limit(state)
        except ProblemError as exc:
            await deny(websocket, exc.response())
            return
        await websocket.accept()
        conn = AgentConnection(session_id, api.surface.ids.new("agent"), websocket, after)
        try:
            await api.channel.connect(conn)
            conn.tasks.append(api.executor.follow(conn))
            await conn.send(
                HelloFrame(session_id=session_id, connection_id=conn.connection_id, after=after)
            )
            async with sockets.until_expiry(websocket, session_id):
                await _serve(api, conn, state)
        finally:
            # Recorded even when the handler is cancelled (shutdown): nothing stays `sent`.
            await asyncio.shield(api.channel.disconnect(conn))


def _after(raw: str | None) -> int:
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or len(raw) > 19:
        raise ValueError("after must be a non-negative integer (the last seq seen)")
    return int(raw)


async def _serve(api: AgentApi, conn: AgentConnection, state: SessionState) -> None:
    """Read frames until the agent leaves; refuse bad ones with an error frame."""
    websocket = conn.websocket
    while not conn.closed:
        try:
            message = await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            return
        if message["type"] == "websocket.disconnect":
            return
        text = message.get("text")
        if text is None:
            await _error(conn, 400, "binary_frame", "frames are JSON text")
            continue
        await _frame(api, conn, state, text)


async def _frame(api: AgentApi, conn: AgentConnection, state: SessionState, text: str) -> None:
    if len(text) > api.surface.settings.max_body_bytes:
        await _error(conn, 413, "frame_too_large", "the frame exceeds the body limit")
        return
    try:
        frame = CLIENT_FRAME.decode(text)
    except msgspec.ValidationError as exc:
        await _error(conn, 422, "invalid_frame", str(exc), **_ids(text))
        return
    except msgspec.DecodeError as exc:
        await _error(conn, 400, "malformed_json", str(exc))
        return
    if isinstance(frame, SignalFrame):
        if frame.user_speaking is None and frame.agent_speaking is None:
            await _error(conn, 422, "invalid_frame", "give user_speaking, agent_speaking or both")
            return
        if await _limited(api, conn, state):
            return
        await api.acks.signal(conn.session_id, frame.user_speaking, frame.agent_speaking)
        return
    if await _limited(api, conn, state, delivery_id=frame.delivery_id, ack_status=frame.status):
        return
    view = api.surface.view
    if view.deliveries.get(frame.delivery_id) is None:
        await view.sync()
    try:
        answer = await api.ack(
            conn.session_id, frame.delivery_id, frame.status, heard_text=frame.heard_text,
            turn_id=frame.turn_id, connection_id=conn.connection_id,
        )
    except AckRefused as exc:
        await _error(conn, exc.status, exc.code, exc.detail, delivery_id=frame.delivery_id,
                     ack_status=frame.status)
        return
    await conn.send(AckedFrame(**answer))


async def _limited(
    api: AgentApi, conn: AgentConnection, state: SessionState, **ids: Any
) -> bool:
    """Take a write's tokens (the session's and the tenant's, as the HTTP routes do); when
    over the limit, answer an `error` frame (429, `rate_limited`) and append nothing."""
    try:
        api.surface.limit(state)
    except ProblemError as exc:
        await _error(conn, 429, "rate_limited", exc.detail, **ids)
        return True
    return False


def _ids(text: str) -> dict[str, Any]:
    """The delivery and ack status of a refused ack frame, so the client can match it."""
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(raw, dict) or raw.get("type") != "delivery.ack":
        return {}
    ids = {k: raw[k] for k in ("delivery_id",) if isinstance(raw.get(k), str)}
    if isinstance(raw.get("status"), str):
        ids["ack_status"] = raw["status"]
    return ids


async def _error(conn: AgentConnection, status: int, code: str, detail: str, **ids: Any) -> None:
    await conn.send(ErrorFrame(code=code, status=status, detail=detail, **ids))
