"""`/mcp` on the surface's own app: the `mcp` SDK's Streamable HTTP, stateless.

The SDK's session manager runs stateless with JSON responses: no MCP session lives in a
process, so any surface answers any request (a task is a projection of the session's
events, `projection.py`). Each request is authenticated first (`auth.py`); a refused one
is answered 401/403 with a JSON-RPC error and never reaches the SDK. The manager's task
group runs in one task of its own from start-up to shutdown (`McpEndpoint.start`/`stop`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INVALID_REQUEST
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from .auth import McpAuth, Refused
from .handlers import SESSION_KEY, McpHandlers
from .legacy import LegacyTasks
from .listen import ToolsListener
from .params import TaskParams, UpdateParams
from .tasks import TASKS_EXTENSION

log = logging.getLogger(__name__)

PATH = "/mcp"


def build_server(handlers: McpHandlers, version: str) -> Server[Any]:
    """The low-level MCP server: tools, the tasks extension's three methods, and (in front
    of the SDK's dispatch, on a 2025-11-25 connection) that version's tasks API."""
    server: Server[Any] = Server(
        "holdline",
        version=version,
        instructions=(
            "holdline runs these tools durably: a call is answered at once (as a task when "
            "the client takes tasks) and its one true result comes later."
        ),
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,  # type: ignore[arg-type]
        on_subscriptions_listen=ToolsListener(handlers),
    )
    server.add_request_handler("tasks/get", TaskParams, handlers.get)
    server.add_request_handler("tasks/update", UpdateParams, handlers.update)
    server.add_request_handler("tasks/cancel", TaskParams, handlers.cancel)
    server.extensions[TASKS_EXTENSION] = {}
    server.middleware.append(LegacyTasks(handlers))
    return server


async def _refuse(send: Send, status: int, message: str) -> None:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}}
    ).encode()
    headers = [(b"content-type", b"application/json")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="holdline"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpEndpoint:
    """The ASGI app mounted at `/mcp`, and the SDK's session manager under it."""

    def __init__(self, auth: McpAuth, server: Server[Any]) -> None:
        self.auth = auth
        self.manager = StreamableHTTPSessionManager(server, json_response=True, stateless=True)
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        async with self.manager.run():
            self._ready.set()
            await self._stop.wait()

    async def start(self) -> None:
        """Run the manager's task group (once the surface's parts are started)."""
        self._task = asyncio.create_task(self._run(), name="mcp-session-manager")
        await self._ready.wait()

    async def stop(self) -> None:
        """End it (at shutdown)."""
        self._stop.set()
        if self._task is not None:
            await self._task

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if not self._ready.is_set():
            await _refuse(send, 503, "holdline is starting; retry")
            return
        if scope["method"] in ("GET", "DELETE"):
            # Stateless: no standalone stream and no session to end.
            await send({"type": "http.response.start", "status": 405,
                        "headers": [(b"allow", b"POST")]})
            await send({"type": "http.response.body", "body": b""})
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        client = scope.get("client")
        peer = client[0] if client else None
        try:
            session = await self.auth.session(peer, headers)
        except Refused as exc:
            await _refuse(send, exc.status, exc.detail)
            return
        scope.setdefault("state", {})[SESSION_KEY] = session.session_id
        # The SDK routes on the path it was mounted at; serve it as the root.
        await self.manager.handle_request(scope, receive, send)


def install_mcp(app: Any, handlers: McpHandlers, version: str) -> McpEndpoint:
    """Mount `/mcp` on the app's own router (no second process, no second port), and
    document it in the app's OpenAPI document."""
    endpoint = McpEndpoint(McpAuth(handlers.surface), build_server(handlers, version))
    app.router.routes.append(Route(PATH, endpoint=endpoint, methods=["GET", "POST", "DELETE"]))
    document_mcp(app)
    return endpoint


MCP_OPERATION: dict[str, Any] = {
    "summary": "MCP Streamable HTTP (JSON-RPC)",
    "description": (
        "holdline as an MCP server (docs/guides/mcp.md): `tools/list`, `tools/call` (a task "
        "when the client advertises io.modelcontextprotocol/tasks), `tasks/get`, "
        "`tasks/update`, `tasks/cancel`; on a 2025-11-25 connection a `tools/call` with "
        "`task` is a task too, with `tasks/get`, `tasks/result`, `tasks/list`, "
        "`tasks/cancel`. Authenticated by a session's bearer token or "
        "X-Holdline-User/X-Holdline-Tenant (+ X-Api-Key); errors are JSON-RPC errors."
    ),
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {"type": "object"}}},
    },
    "responses": {
        "200": {"description": "A JSON-RPC response"},
        "202": {"description": "A notification, accepted"},
        "400": {"description": "A malformed JSON-RPC message (a JSON-RPC error)"},
        "401": {"description": "No session's token and no identity headers"},
        "403": {"description": "A credential for someone else"},
    },
}


def document_mcp(app: Any) -> None:
    """Add `/mcp` (an ASGI route, not a FastAPI one) to the app's OpenAPI document."""
    original = app.openapi

    def openapi() -> dict[str, Any]:
        doc: dict[str, Any] = original()
        doc.setdefault("paths", {}).setdefault(PATH, {"post": MCP_OPERATION})
        return doc

    app.openapi = openapi
