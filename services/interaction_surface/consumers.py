"""interaction-surface on the bus: its durable consumer and the streams it appends to.

Read by `make proto` (the AsyncAPI operations) and for the docs' consumer table
(libs/roles.py). Its live view follows every stream through ordered consumers
(projections.py), which are not durable and not declared here.
"""

from __future__ import annotations

from typing import Final

from libs.bus import Context
from libs.events import (
    BatchOpened,
    DeliveryAttached,
    DeliveryDecided,
    DeliveryDelivered,
    DeliveryReconciliationRequested,
    DeliverySent,
    DeliverySpoken,
    DeliverySuperseded,
    DeliverySuppressed,
    DeliveryUnheard,
    OperationAdmitted,
    OperationAwaitingConfirmation,
    OperationCancelRequested,
    OperationCompensated,
    OperationConfirmed,
    OperationRejected,
    OperationRequested,
)
from libs.roles import ConsumerDeclaration, Publication

from .delivery.routing import ACTED_ON

SERVICE: Final = "interaction-surface"

# Executing decisions: the kinds after which the delivery executor has a step to take.
DELIVERIES: Final = ConsumerDeclaration(
    SERVICE,
    "deliveries",
    Context.DELIVERIES,
    "Executes delivery decisions on the session's channel (chat, call, agent) and records"
    " what was sent and heard.",
    kinds=ACTED_ON,
)

CONSUMERS: Final = (DELIVERIES,)

PUBLICATIONS: Final = (
    Publication(
        SERVICE,
        Context.INTERACTION,
        "Appends conversation and channel events of each session.",
    ),
    Publication(SERVICE, Context.CONTROL, "Publishes barge-ins and cancellations."),
    # Admission and its follow-ups (confirm, cancel, compensate) happen here; everything
    # later in an operation's life is the worker's (its consumers.py excludes the same).
    Publication(
        SERVICE,
        Context.OPERATIONS,
        "Records tool calls and their admission or rejection.",
        only=(
            OperationRequested,
            OperationAwaitingConfirmation,
            OperationConfirmed,
            OperationAdmitted,
            OperationRejected,
            OperationCancelRequested,
            OperationCompensated,
        ),
    ),
    Publication(
        SERVICE,
        Context.BATCHES,
        "Opens the batch of operations admitted in one turn.",
        only=(BatchOpened,),
    ),
    Publication(
        SERVICE,
        Context.DELIVERIES,
        "Records what its channels sent, said and heard, and a turn's refusal of a stale"
        " update.",
        only=(
            DeliveryDecided,
            DeliverySent,
            DeliveryDelivered,
            DeliverySpoken,
            DeliveryUnheard,
            DeliverySuppressed,
            DeliverySuperseded,
            DeliveryAttached,
            DeliveryReconciliationRequested,
        ),
    ),
)
