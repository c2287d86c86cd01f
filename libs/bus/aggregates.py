"""The runtime's aggregate types as a `Repository` knows them, one builder per context.

Each names its stream under a topology, its codec and its fold; the operation's also how an
event about an existing operation is stamped (every id the operation carries). Batches and
deliveries are stamped by their shells (deterministic ids, causations), so they have none.
Control requests and work commands are facts, not folded: their state is always None.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from libs.domain import BatchState, DeliveryState, OperationState
from libs.domain import batch as batch_domain
from libs.domain import delivery as delivery_domain
from libs.domain import operation as operation_domain
from libs.events import (
    BATCHES,
    CONTROL,
    DELIVERIES,
    OPERATIONS,
    WORK,
    BatchEvent,
    ControlEvent,
    DeliveryEvent,
    Envelope,
    OperationEvent,
    WorkCommand,
)

from .repository import Aggregate
from .topology import Context, Topology


def _stamp_operation(
    state: OperationState | None, event: OperationEvent, event_id: str, now: datetime
) -> Envelope[OperationEvent]:
    if state is None:
        raise ValueError("an event about an operation needs the operation's state")
    return operation_domain.envelope_for(state, event, event_id=event_id, now=now)


def _not_folded(state: None, env: Envelope[Any]) -> None:
    """A fact stream: nothing is folded from it."""


def operations(topology: Topology) -> Aggregate[OperationState, OperationEvent]:
    """An operation: the wildcard over its kinds, folded by its state machine."""
    return Aggregate(
        label="operations",
        stream=topology.stream_name(Context.OPERATIONS),
        codec=OPERATIONS,
        evolve=operation_domain.evolve,
        stamp=_stamp_operation,
    )


def batches(topology: Topology) -> Aggregate[BatchState, BatchEvent]:
    """A batch: the wildcard over its kinds, folded by the batch decider's evolve."""
    return Aggregate(
        label="batches",
        stream=topology.stream_name(Context.BATCHES),
        codec=BATCHES,
        evolve=batch_domain.evolve,
    )


def deliveries(topology: Topology) -> Aggregate[DeliveryState, DeliveryEvent]:
    """A delivery: the wildcard over its kinds, folded by its state machine."""
    return Aggregate(
        label="deliveries",
        stream=topology.stream_name(Context.DELIVERIES),
        codec=DELIVERIES,
        evolve=delivery_domain.evolve,
    )


def control(topology: Topology) -> Aggregate[None, ControlEvent]:
    """A session's control requests (a cancellation asked for): recorded, never folded."""
    return Aggregate(
        label="control",
        stream=topology.stream_name(Context.CONTROL),
        codec=CONTROL,
        evolve=_not_folded,
    )


def work(topology: Topology) -> Aggregate[None, WorkCommand]:
    """Work commands (an operator's redrive): recorded, never folded."""
    return Aggregate(
        label="work",
        stream=topology.stream_name(Context.WORK),
        codec=WORK,
        evolve=_not_folded,
    )
