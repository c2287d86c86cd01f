"""Typed async client for holdline's Agent API (docs/contract.md §6b).

Depends on httpx, msgspec and websockets only (`pip install 'holdline[client]'`), never on
the runtime's packages, so an agent process carries nothing of the server. The WebSocket
frames are defined once, in `holdline.client.frames`; the server imports them from there.
"""

from .http import HoldlineClient, SessionClient
from .models import (
    AckResult,
    AckStatus,
    DeliverySay,
    Fact,
    HoldlineError,
    OperationRef,
    PendingDelivery,
    PendingUpdates,
    ToolCall,
    ToolCallResult,
    ToolCallsResponse,
    ToolFormat,
)
from .stream import AgentStream

__all__ = [
    "AckResult",
    "AckStatus",
    "AgentStream",
    "DeliverySay",
    "Fact",
    "HoldlineClient",
    "HoldlineError",
    "OperationRef",
    "PendingDelivery",
    "PendingUpdates",
    "SessionClient",
    "ToolCall",
    "ToolCallResult",
    "ToolCallsResponse",
    "ToolFormat",
]
