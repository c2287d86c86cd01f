"""What the agent channel writes the same way for pushes, acks and losses: a delivery's
send record read from the session's log (`send_info`), its playback events, the words a cut
closing left in history, and the facts an agent's model phrases.

Pushing, acknowledging and losing a connection all read and write the same per-delivery
send record, so it is read in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from holdline.client.frames import Fact
from libs.clock import Clock, Ids
from libs.domain import DeliveryState
from libs.domain.delivery import envelope_for as delivery_envelope
from libs.domain.operation import OperationState
from libs.events import (
    DeliveryAttached,
    DeliverySent,
    DeliveryUnheard,
    PlaybackFinished,
    PlaybackStarted,
    TurnReplied,
)

from ..core.session_log import Entry
from ..core.view import SurfaceView
from ..core.writes import SurfaceWrites


@dataclass(frozen=True, slots=True)
class SendInfo:
    """How a delivery was last handed to a channel, read from the session's log."""

    channel: str | None = None
    connection_id: str | None = None
    started: bool = False


def send_info(entries: Sequence[Entry], delivery_id: str) -> SendInfo:
    """The last `delivery.sent`/`delivery.attached` of a delivery and whether it started."""
    info = SendInfo()
    for entry in entries:
        env = entry.envelope
        if env.delivery_id != delivery_id:
            continue
        event = env.event
        if isinstance(event, DeliverySent):
            info = SendInfo(event.channel, event.connection_id, False)
        elif isinstance(event, DeliveryAttached):
            info = SendInfo("attached", None, False)
        elif isinstance(event, PlaybackStarted) and info.channel == "agent":
            info = SendInfo(info.channel, info.connection_id, True)
    return info


def summary(op: OperationState) -> str:
    """One line naming what the operation did and how it ended (or where it stands)."""
    shown = ", ".join(
        f"{k}={v}" for k, v in sorted(op.arguments.items()) if not k.startswith("_")
    )
    line = f"{op.tool}({shown}): {op.status.value}"
    return f"{line}: {op.failure}" if op.failure else line


class AgentRecords:
    """Reads a delivery's send record and writes its playback, heard words and give-backs."""

    def __init__(self, view: SurfaceView, writes: SurfaceWrites, *, clock: Clock, ids: Ids) -> None:
        self.view = view
        self.writes = writes
        self._clock = clock
        self._ids = ids

    def info(self, state: DeliveryState) -> SendInfo:
        """How the delivery was last handed to a channel."""
        found = self.view.log(state.session_id)
        return send_info(found.entries if found is not None else [], state.delivery_id)

    def facts(self, state: DeliveryState) -> list[Fact]:
        """What each operation of the closing came to, for the agent's own model."""
        facts: list[Fact] = []
        for operation_id in state.source_operation_ids:
            op = self.view.operations.get(operation_id)
            if op is not None:
                facts.append(
                    Fact(
                        operation_id=operation_id,
                        tool=op.tool,
                        status=op.status.value,
                        summary=summary(op),
                    )
                )
        return facts

    async def not_said(
        self, state: DeliveryState, reason: str, connection_id: str | None = None
    ) -> None:
        """Handed over but not pushed: recorded as sent and unheard, so the policy decides again."""
        await self.writes.delivery(
            state, DeliverySent(mode="proactive", channel="agent", connection_id=connection_id)
        )
        current = self.view.deliveries.get(state.delivery_id) or state
        await self.writes.delivery(current, DeliveryUnheard(played_ms=0, reason=reason))

    async def give_back(self, state: DeliveryState, reason: str | None = None) -> None:
        """A pushed delivery its connection can no longer confirm: back to pending."""
        info = self.info(state)
        if info.started:
            await self.playback(state, heard=False)
        code = reason or (
            "cut: agent connection lost" if info.started else "not_started: agent connection lost"
        )
        await self.writes.delivery(state, DeliveryUnheard(played_ms=0, reason=code))

    async def playback(self, state: DeliveryState, *, heard: bool | None) -> None:
        """`playback.started` (heard None) or `.finished` for the delivery's current send."""
        event: Any = (
            PlaybackStarted(text=state.text, duration_ms=0)
            if heard is None
            else PlaybackFinished(heard=heard, played_ms=0)
        )
        kind = "started" if heard is None else "finished"
        env = delivery_envelope(state, event, event_id=self._ids.new("ev"), now=self._clock.now())
        await self.writes.record(env, f"agent-{kind}-{state.delivery_id}-{state.attempts}")

    async def heard_part(self, state: DeliveryState, heard: str) -> None:
        """What the user heard of a cut closing: history keeps those words, not the closing."""
        env = delivery_envelope(
            state, TurnReplied(text=heard), event_id=self._ids.new("ev"), now=self._clock.now(),
            carries=False,
        )
        await self.writes.record(env, f"heard-{state.delivery_id}-{state.attempts}")
