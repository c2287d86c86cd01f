"""batch-coordinator on the bus: its durable consumers and the streams it appends to.

Read by the runtime (its consumers, bound to `Coordinator` methods in app.py), by
`make proto` (the AsyncAPI operations) and for the docs' consumer table (libs/roles.py).
Both consumers are per partition: each sees every message and works only on its sessions.
"""

from __future__ import annotations

from typing import Final

from libs.bus import Context
from libs.events import BatchDrained, OperationRejected
from libs.roles import ConsumerDeclaration, Publication

from .domain import COORDINATED
from .handlers import Coordinator
from .settings import SERVICE

OPERATIONS: Final = ConsumerDeclaration(
    SERVICE,
    "operations",
    Context.OPERATIONS,
    "Follows members of open batches to their terminal states.",
    kinds=COORDINATED,
    partitioned=True,
)
BATCHES: Final = ConsumerDeclaration(
    SERVICE,
    "batches",
    Context.BATCHES,
    "Takes each opened batch; its own drains it folds as it appends them.",
    kinds=Coordinator.CONSUMED_BATCH_EVENTS,
    partitioned=True,
)

CONSUMERS: Final = (OPERATIONS, BATCHES)

PUBLICATIONS: Final = (
    Publication(
        SERVICE,
        Context.BATCHES,
        "Records the drain of each batch, with how every member settled.",
        only=(BatchDrained,),
    ),
    Publication(
        SERVICE,
        Context.DELIVERIES,
        "Creates deliveries for settled operations and drained batches.",
    ),
    Publication(
        SERVICE,
        Context.OPERATIONS,
        "Rejects a batch member still silent past the grace after `batch.opened` as"
        " `interrupted` (interrupted.py).",
        only=(OperationRejected,),
    ),
)
