"""The `mcp` delivery channel over the live view and the one write path (no broker): it takes
only tasked batches' closings, and a `tasks/get` hands one out once, on `mcp`."""

from __future__ import annotations

import pytest

from libs.clock import ManualClock, SequentialIds
from libs.domain import BatchState
from libs.domain.delivery import DeliveryStatus
from libs.events import DeliveryDecided, DeliverySent
from services.interaction_surface.agent.records import AgentRecords
from services.interaction_surface.core.view import SurfaceView
from services.interaction_surface.delivery.routing import Reach
from services.interaction_surface.mcp.channel import McpChannel
from services.interaction_surface.mcp.projection import Tasks

from ..test_channels import NOW, FeedingStore, _delivery, _world

pytestmark = pytest.mark.fast

WAITING = DeliveryDecided(decision="attach_next_turn", reason="window_expired")


async def _channel(turn_id: str) -> tuple[McpChannel, SurfaceView, FeedingStore]:
    view, store, writes = await _world()
    view.batches.states["b1"] = BatchState(batch_id="b1", session_id="s1", turn_id=turn_id)
    records = AgentRecords(view, writes, clock=ManualClock(NOW), ids=SequentialIds())
    return McpChannel(Tasks(view), writes, records), view, store


async def test_it_takes_a_tasked_batchs_closing_and_nothing_else() -> None:
    tasked, view, store = await _channel("mcpt_1")
    await _delivery(store, "d1")
    state = view.deliveries.get("d1")
    assert state is not None
    assert await tasked.reach(state) is Reach.TAKES
    untasked, view2, store2 = await _channel("mcpc_1")
    await _delivery(store2, "d1")
    other = view2.deliveries.get("d1")
    assert other is not None
    assert await untasked.reach(other) is Reach.ABSENT


async def test_a_closing_the_policy_holds_is_handed_out_once_on_mcp() -> None:
    channel, view, store = await _channel("mcpt_1")
    await _delivery(store, "d1", WAITING)
    await channel.hand_out("d1")
    await channel.hand_out("d1")
    state = view.deliveries.get("d1")
    assert state is not None
    assert state.status is DeliveryStatus.DELIVERED
    assert state.attempts == 1
    assert channel.holds_sent(state)


async def test_a_closing_sent_on_another_channel_is_left_alone() -> None:
    channel, view, store = await _channel("mcpt_1")
    await _delivery(store, "d1", DeliverySent(mode="proactive", channel="chat"))
    await channel.hand_out("d1")
    state = view.deliveries.get("d1")
    assert state is not None
    assert state.status is DeliveryStatus.SENT
