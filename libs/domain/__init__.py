"""Pure state machines and projections: no I/O, no clock, no random ids inside."""

from . import batch, channel, delivery, operation, session, sync_mode
from .batch import BatchError, BatchState, final_delivery_id, final_delivery_key
from .channel import ChannelState, OperationFacts
from .delivery import DeliveryState, DeliveryStatus, IllegalDeliveryTransition
from .delivery_gate import GateView, choose_delivery, decide_delivery
from .gate_policy import GatePolicy
from .operation import TERMINAL, IllegalTransition, OperationState, OpStatus
from .projection import Projection
from .session import Message, PendingHearing, SessionError, SessionState
from .sync_mode import SyncMode

__all__ = [
    "TERMINAL",
    "BatchError",
    "BatchState",
    "ChannelState",
    "DeliveryState",
    "DeliveryStatus",
    "GatePolicy",
    "GateView",
    "IllegalDeliveryTransition",
    "IllegalTransition",
    "Message",
    "OpStatus",
    "OperationFacts",
    "OperationState",
    "PendingHearing",
    "Projection",
    "SessionError",
    "SessionState",
    "SyncMode",
    "batch",
    "channel",
    "choose_delivery",
    "decide_delivery",
    "delivery",
    "final_delivery_id",
    "final_delivery_key",
    "operation",
    "session",
    "sync_mode",
]
