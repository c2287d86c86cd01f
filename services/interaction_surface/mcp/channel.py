"""The `mcp` delivery channel: the closing of a tasked call is its task's result.

A batch admitted by a tasked `tools/call` (its turn id starts `mcpt_`) is said nowhere
else: handed over to be said now, its closing is recorded `delivery.sent{channel: mcp}`,
and the first `tasks/get` that hands it out records `delivery.delivered` (`hand_out`). A
closing the policy still holds (waiting for a window a polled task does not need) is sent
and delivered by that `tasks/get` itself: the client asked for it.
Every other delivery is not this channel's (`Reach.ABSENT`), so untasked calls go on to
the agent channel and `/pending`, as the Agent API's do.
"""

from __future__ import annotations

from libs import metrics
from libs.bus import ConcurrencyConflict
from libs.domain import DeliveryState
from libs.domain.delivery import DeliveryStatus
from libs.events import DeliveryDelivered, DeliverySent

from ..agent.records import AgentRecords
from ..core.writes import SurfaceWrites
from ..delivery.routing import Reach
from .projection import Tasks
from .tasks import task_result


class McpChannel:
    """Takes the closings of tasked batches; `tasks/get` finishes them."""

    def __init__(self, tasks: Tasks, writes: SurfaceWrites, records: AgentRecords) -> None:
        self._tasks = tasks
        self._writes = writes
        self._records = records

    def busy(self, delivery_id: str) -> bool:
        """Nothing is said over time: never busy."""
        return False

    async def reach(self, state: DeliveryState) -> Reach:
        """A tasked batch's closing is this channel's; nothing else is."""
        mine = task_result(state.turn_id) or self._tasks.tasked(state.batch_id)
        return Reach.TAKES if mine else Reach.ABSENT

    async def hand_over(self, state: DeliveryState) -> None:
        """Recorded sent on `mcp`: the task's next `tasks/get` hands it out."""
        await self._writes.delivery(state, DeliverySent(mode="proactive", channel="mcp"))

    def holds_sent(self, state: DeliveryState) -> bool:
        """Sent on `mcp`: waiting for its `tasks/get`."""
        return self._records.info(state).channel == "mcp"

    async def settle(self, state: DeliveryState) -> None:
        """Nothing to finish: the client's `tasks/get` does."""

    def strandable(self, state: DeliveryState) -> bool:
        """No connection to lose: the task holds the closing."""
        return False

    async def sweep(self) -> None:
        """No connections to record."""

    async def hand_out(self, delivery_id: str) -> None:
        """A `tasks/get` handed the closing out: `delivery.sent{mcp}` if the policy still
        holds it (the client asked: no window to wait for), then `delivery.delivered`, once."""
        view = self._tasks.view
        for _ in range(8):
            current = view.deliveries.get(delivery_id)
            if current is None:
                return
            try:
                if current.status in (DeliveryStatus.PENDING, DeliveryStatus.WAITING):
                    await self.hand_over(current)
                    continue
                if current.status is not DeliveryStatus.SENT or not self.holds_sent(current):
                    return
                await self._writes.delivery(current, DeliveryDelivered())
            except ConcurrencyConflict:
                await view.sync()
                continue
            metrics.DELIVERIES.labels(mode=current.mode or "proactive", channel="mcp").inc()
            return
