"""operation-worker on the bus: its durable consumers and the streams it appends to.

Read by the runtime (its consumers, bound to `Worker` methods in app.py), by `make proto`
(the AsyncAPI operations) and for the docs' consumer table (libs/roles.py).
"""

from __future__ import annotations

from typing import Final

from libs.bus import Context
from libs.events import (
    OperationAdmitted,
    OperationAwaitingConfirmation,
    OperationCancelRequested,
    OperationCompensated,
    OperationConfirmed,
    OperationRejected,
    OperationRequested,
)
from libs.roles import ConsumerDeclaration, Grouping, Publication

from .domain import DISPATCHED
from .settings import SERVICE

# The operations consumer runs the work itself (no work command, no load of an admitted
# operation): one message at a time per operation (its admitted and its cancel_requested,
# in stream order), many operations at once per worker. The durable keeps its name from
# when it only relayed (`operation-worker-dispatch`) so a deployment carries on where it
# left off instead of a new durable replaying every admitted event from the stream's start.
DISPATCH: Final = ConsumerDeclaration(
    SERVICE,
    "dispatch",
    Context.OPERATIONS,
    "Runs admitted operations and cancel requests as they arrive; reads operation history"
    " to resume and reconcile operations.",
    kinds=DISPATCHED,
    grouping=Grouping.AGGREGATE,
)
# Work commands an operator re-drives (libs/operator) or an older worker relayed: run the
# same way, one at a time per operation too (`operation-worker-work`).
WORK: Final = ConsumerDeclaration(
    SERVICE,
    "work",
    Context.WORK,
    "Takes work commands (an operator's re-drive) from the work queue.",
    grouping=Grouping.SUBJECT,
)

CONSUMERS: Final = (DISPATCH, WORK)

# Admission's operation events and its follow-ups' are the interaction surface's (its
# `consumers.py` lists the same as its only ones); everything later in an operation's life
# is the worker's, so a new operation event defaults to the worker.
_ADMISSION: Final = (
    OperationRequested,
    OperationAwaitingConfirmation,
    OperationConfirmed,
    OperationAdmitted,
    OperationRejected,
    OperationCancelRequested,
    OperationCompensated,
)

PUBLICATIONS: Final = (
    Publication(
        SERVICE,
        Context.OPERATIONS,
        "Records execution, retries and terminal states.",
        exclude=_ADMISSION,
    ),
    Publication(SERVICE, Context.DLQ, "Dead-letters messages it gave up on."),
)
