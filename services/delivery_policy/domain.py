"""The policy's projections: channel per session, operation facts, deliveries. No I/O.

Each fold ignores a stream sequence it already applied, so the start-up replay and the
durable consumers may overlap freely.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator
from datetime import UTC, datetime

from libs.domain import Projection
from libs.domain import delivery as delivery_domain
from libs.domain.channel import ChannelState, OperationFacts, evolve_channel, evolve_facts
from libs.domain.delivery import DeliveryState
from libs.domain.delivery_gate import GateView
from libs.events import (
    DeliveryDecided,
    DeliveryEvent,
    DeliveryReady,
    DeliveryRequeued,
    Envelope,
    InteractionEvent,
    OperationEvent,
)

_EPOCH = datetime.min.replace(tzinfo=UTC)

# The delivery events the policy's consumer asks the broker for: every kind but two.
# `delivery.requeued` is only ever the policy's own, and so is `delivery.decided` but for
# one case: `Gate._append` folds each event it appends, so hearing it again changes nothing.
# The surface also appends `delivery.decided` when a turn refuses a stale update
# (`refusal_events`), and then always its `delivery.superseded` or `delivery.suppressed`,
# which the consumer does deliver: the decision it carries moves no status (suppress and
# supersede leave the delivery where it was), so until that closing event arrives the
# policy's fold differs only in the recorded decision and reason, and any decision the
# policy appends meanwhile was made on an older sequence and conflicts, which reloads the
# delivery whole through its wildcard subject.
CONSUMED_DELIVERY_EVENTS: tuple[type[DeliveryEvent], ...] = tuple(
    t for t in typing.get_args(DeliveryEvent) if t not in (DeliveryDecided, DeliveryRequeued)
)


class GateProjections:
    """Everything the gate decides from, for every session this process serves."""

    def __init__(self) -> None:
        self.channels: Projection[ChannelState, InteractionEvent] = Projection(
            evolve_channel, key=lambda env: env.session_id
        )
        self.deliveries: Projection[DeliveryState, DeliveryEvent] = Projection(
            delivery_domain.evolve, key=lambda env: env.delivery_id or ""
        )
        self.facts: dict[str, OperationFacts] = {}
        self._facts_seq: dict[str, int] = {}
        self._session_ops: dict[str, set[str]] = {}
        self._session_deliveries: dict[str, set[str]] = {}
        # batch id -> its final delivery id, once delivery.ready of the final exists.
        self.finals: dict[str, str] = {}

    def apply_interaction(self, env: Envelope[InteractionEvent], seq: int) -> bool:
        """Fold an interaction event; False when it was already applied."""
        if seq <= self.channels.last_seq.get(env.session_id, 0):
            return False
        self.channels.apply(env, seq)
        return True

    def apply_operation(self, env: Envelope[OperationEvent], seq: int) -> bool:
        """Fold an operation event into the gate's facts; False when already applied."""
        op_id = env.operation_id
        if not op_id or seq <= self._facts_seq.get(op_id, 0):
            return False
        self._facts_seq[op_id] = seq
        self.facts[op_id] = evolve_facts(self.facts.get(op_id), env, seq)
        self._session_ops.setdefault(env.session_id, set()).add(op_id)
        return True

    def apply_delivery(self, env: Envelope[DeliveryEvent], seq: int) -> bool:
        """Fold a delivery event; False when already applied."""
        delivery_id = env.delivery_id
        if not delivery_id or seq <= self.deliveries.last_seq.get(delivery_id, 0):
            return False
        state = self.deliveries.apply(env, seq)
        self._session_deliveries.setdefault(env.session_id, set()).add(delivery_id)
        event = env.event
        if isinstance(event, DeliveryReady) and event.kind == "final" and env.batch_id:
            self.finals.setdefault(env.batch_id, delivery_id)
        return state is not None

    def replace_delivery(self, state: DeliveryState, last_seq: int) -> None:
        """Adopt a delivery reloaded from its subject, unless the fold is already further."""
        if last_seq >= self.deliveries.last_seq.get(state.delivery_id, 0):
            self.deliveries.states[state.delivery_id] = state
            self.deliveries.last_seq[state.delivery_id] = last_seq

    def view(self, session_id: str) -> GateView:
        """The session's projections, as the pure decider takes them."""
        ops = tuple(self.facts[o] for o in self._session_ops.get(session_id, ()))
        return GateView(
            channel=self.channels.get(session_id),
            ops=self.facts,
            session_ops=ops,
            finals=self.finals,
        )

    def open_deliveries(self, session_id: str) -> list[DeliveryState]:
        """The session's deliveries that may still reach the user, oldest first."""
        states = [
            s
            for d in self._session_deliveries.get(session_id, ())
            if (s := self.deliveries.get(d)) is not None and s.open
        ]
        return sorted(states, key=lambda s: (s.ready_at or _EPOCH, s.delivery_id))

    def sessions_with_open_deliveries(self) -> Iterator[str]:
        """Sessions owed something, for re-arming after a restart."""
        for session_id, ids in self._session_deliveries.items():
            if any((s := self.deliveries.get(d)) is not None and s.open for d in ids):
                yield session_id
