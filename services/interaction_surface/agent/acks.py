"""The agent's reports (docs/contract.md §6b), recorded as a call's VAD, playback marks and
settling would record them.

- ack `started` → `playback.started` (the gate holds other closings back meanwhile);
- ack `spoken` → the closing in history, `playback.finished{heard}`, `delivery.spoken`;
- ack `unheard` (+ `heard_text`) → the heard words in history (never the closing),
  `playback.finished{heard: false}`, `delivery.unheard`; the policy requeues the short text;
- ack `attached` → `delivery.attached` (if it was not pushed), the closing in history,
  `delivery.delivered`;
- signals `user_speaking` / `agent_speaking` → `speech.started|stopped` /
  `playback.started|finished`.

Rule 7 holds because only a `spoken` ack writes `delivery.spoken`. Every ack is idempotent
and read again after a lost race, under the one conflict policy.
"""

from __future__ import annotations

from typing import Any

from holdline.client.frames import AckStatus
from libs import metrics
from libs.bus import TooManyConflicts
from libs.domain import DeliveryState
from libs.domain.delivery import OPEN, DeliveryStatus
from libs.events import (
    DeliveryAttached,
    DeliveryDelivered,
    DeliverySent,
    DeliverySpoken,
    DeliveryUnheard,
    PlaybackFinished,
    PlaybackStarted,
    SpeechStarted,
    SpeechStopped,
)

from ..core.session_locks import SessionLocks
from ..core.surface import Surface
from ..core.writes import SurfaceWrites
from .connections import AgentRegistry
from .records import AgentRecords

_SAID = frozenset({DeliveryStatus.SPOKEN, DeliveryStatus.DELIVERED})
_DROPPED = frozenset({DeliveryStatus.SUPPRESSED, DeliveryStatus.SUPERSEDED})


class AckRefused(Exception):
    """An acknowledgement that contradicts the delivery's record; nothing was written."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail


class AgentAcks:
    """Records what an agent's acknowledgements and signals report."""

    def __init__(
        self,
        surface: Surface,
        writes: SurfaceWrites,
        records: AgentRecords,
        registry: AgentRegistry,
    ) -> None:
        self._surface = surface
        self._view = surface.view
        self._writes = writes
        self._records = records
        self._registry = registry
        # One signal of a session at a time: each compares with the view its predecessor's
        # append already reached, so concurrent "started"/"stopped" cannot both be judged
        # against the same stale state (and one of them dropped).
        self._signal_locks = SessionLocks()

    # ------------------------------------------------------------------ signals

    async def signal(
        self, session_id: str, user_speaking: bool | None, agent_speaking: bool | None
    ) -> None:
        """The agent's view of the two clocks, as the call's VAD and playback would say it."""
        async with self._signal_locks.hold(session_id):
            await self._signal(session_id, user_speaking, agent_speaking)

    async def _signal(
        self, session_id: str, user_speaking: bool | None, agent_speaking: bool | None
    ) -> None:
        session = self._view.session(session_id)
        agent = session.agent if session else None
        if user_speaking is not None and (session is None or session.user_active != user_speaking):
            event: Any = SpeechStarted(stream_ms=0) if user_speaking else SpeechStopped(stream_ms=0)
            await self._surface.append_interaction(session_id, event, expect=False, agent=agent)
        if agent_speaking is not None and (
            session is None or session.playback_active != agent_speaking
        ):
            playback: Any = (
                PlaybackStarted(text="", duration_ms=0)
                if agent_speaking
                else PlaybackFinished(heard=True, played_ms=0)
            )
            await self._surface.append_interaction(session_id, playback, expect=False, agent=agent)

    # ------------------------------------------------------------------ acknowledgements

    async def ack(
        self,
        session_id: str,
        delivery_id: str,
        status: AckStatus,
        *,
        heard_text: str | None = None,
        turn_id: str | None = None,
        connection_id: str | None = None,
    ) -> str:
        """Record one acknowledgement (idempotent); the delivery's status afterwards."""

        async def attempt() -> str:
            state = self._view.deliveries.get(delivery_id)
            if state is None or state.session_id != session_id:
                raise AckRefused(404, "unknown_delivery", f"no delivery {delivery_id} here")
            await self._apply_ack(state, status, heard_text, turn_id, connection_id)
            current = self._view.deliveries.get(delivery_id) or state
            return current.status.value

        try:
            return await self._writes.retrying(f"delivery {delivery_id}", attempt)
        except TooManyConflicts:
            raise AckRefused(409, "conflict", "the delivery is changing too fast; retry") from None

    async def _apply_ack(
        self,
        state: DeliveryState,
        status: AckStatus,
        heard_text: str | None,
        turn_id: str | None,
        connection_id: str | None,
    ) -> None:
        if state.status in _DROPPED:
            raise AckRefused(
                409, "delivery_closed",
                f"delivery {state.delivery_id} is {state.status.value}: {state.reason or ''}",
            )
        if status == "unheard" and state.status in _SAID:
            raise AckRefused(
                409, "already_said",
                f"delivery {state.delivery_id} is already {state.status.value}; it cannot be "
                "unheard",
            )
        if state.status in _SAID:
            return  # spoken after spoken, started after spoken, ...: nothing new
        if status == "unheard" and state.status in OPEN:
            return  # already back to pending
        if status == "attached":
            await self._attached(state, turn_id)
            return
        if state.status in OPEN:
            # The agent says it is speaking a delivery it was not (or no longer) pushed:
            # its word is the playback truth, so it is sent to it first (to its live
            # connection when the ack came over HTTP, so losing that settles it too).
            held = self._registry.get(state.session_id)
            if connection_id is None and held is not None:
                connection_id = held.connection_id
            sent = DeliverySent(mode="proactive", channel="agent", connection_id=connection_id)
            await self._writes.delivery(state, sent)
            state = self._view.deliveries.get(state.delivery_id) or state
        info = self._records.info(state)
        if status == "started":
            if not info.started:
                await self._records.playback(state, heard=None)
            return
        if status == "spoken":
            if info.started:
                await self._records.playback(state, heard=True)
            await self._writes.write_message(state)
            state = self._view.deliveries.get(state.delivery_id) or state
            await self._writes.delivery(state, DeliverySpoken())
            metrics.DELIVERIES.labels(mode=state.mode or "proactive", channel="agent").inc()
            return
        # unheard, while sent
        heard = (heard_text or "").strip()
        if heard:
            await self._records.heard_part(state, heard)
        if info.started:
            await self._records.playback(state, heard=False)
        reason = "cut: agent reported it unheard" if info.started or heard else (
            "not_started: agent reported it unheard"
        )
        state = self._view.deliveries.get(state.delivery_id) or state
        await self._writes.delivery(state, DeliveryUnheard(played_ms=0, reason=reason))

    async def _attached(self, state: DeliveryState, turn_id: str | None) -> None:
        if state.status in OPEN:
            attached = DeliveryAttached(attached_to_turn_id=turn_id or f"agent-{state.delivery_id}")
            await self._writes.delivery(state, attached)
            state = self._view.deliveries.get(state.delivery_id) or state
        elif self._records.info(state).started:
            await self._records.playback(state, heard=False)
        await self._writes.write_message(state)
        state = self._view.deliveries.get(state.delivery_id) or state
        if state.status is DeliveryStatus.SENT:
            await self._writes.delivery(state, DeliveryDelivered())
            metrics.DELIVERIES.labels(mode="next_turn", channel="agent").inc()
