"""`subscriptions/listen` (2026-07-28): `notifications/tools/list_changed` when a handoff
changes the session's active agent, so its tools.

The stateless transport has no standing stream; a client that wants change notifications
opens one with `subscriptions/listen`, and this handler writes onto it: the acknowledgement
first, then a `tools/list_changed` each time the session's agent changes in the live view
(whichever surface recorded the handoff). The stream ends when the client goes, the session
closes, or after `MAX_LISTEN_S` (the client listens again and refetches).
"""

from __future__ import annotations

import time
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ToolsListChanged,
    event_to_notification,
)
from mcp_types import (
    INVALID_REQUEST,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from .handlers import McpHandlers

# The longest one listen stream is held open.
MAX_LISTEN_S = 3600.0


class ToolsListener:
    """Serves `subscriptions/listen` for the session the request is bound to."""

    def __init__(self, handlers: McpHandlers) -> None:
        self._handlers = handlers

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """The acknowledgement, then a change notification per handoff."""
        subscription = ctx.request_id
        if subscription is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        session = self._handlers.session_of(ctx)
        view = self._handlers.surface.view
        wanted = bool(params.notifications.tools_list_changed)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: subscription}
        honored = SubscriptionFilter(tools_list_changed=True if wanted else None)
        await ctx.session.send_notification(
            SubscriptionsAcknowledgedNotification(
                params=SubscriptionsAcknowledgedNotificationParams(
                    notifications=honored, _meta=meta
                )
            ),
            related_request_id=subscription,
        )
        agent = session.agent
        deadline = time.monotonic() + MAX_LISTEN_S
        while time.monotonic() < deadline:
            await view.wait_session_change(session.session_id, 5.0)
            current = view.session(session.session_id)
            if current is None or current.closed:
                break
            if current.agent != agent:
                agent = current.agent
                if wanted:
                    await ctx.session.send_notification(
                        event_to_notification(ToolsListChanged(), meta),
                        related_request_id=subscription,
                    )
        return SubscriptionsListenResult(_meta=meta)
