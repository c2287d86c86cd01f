"""delivery-policy on the bus: its durable consumers and the stream it appends to.

Read by the runtime (its consumers, bound to `Gate` methods in app.py), by `make proto`
(the AsyncAPI operations) and for the docs' consumer table (libs/roles.py). Every consumer
is per partition: each sees every message and works only on its own sessions.
"""

from __future__ import annotations

from typing import Final

from libs.bus import Context
from libs.domain.channel import FACT_EVENTS
from libs.roles import ConsumerDeclaration, Publication

from .domain import CONSUMED_DELIVERY_EVENTS
from .settings import SERVICE

INTERACTION: Final = ConsumerDeclaration(
    SERVICE,
    "interaction",
    Context.INTERACTION,
    "Watches speech, playback and typing to find a quiet moment.",
    partitioned=True,
)
OPERATIONS: Final = ConsumerDeclaration(
    SERVICE,
    "operations",
    Context.OPERATIONS,
    "Follows the facts of operations its deliveries are about (an admission, a rejection,"
    " a compensation): how an operation ended reaches it in the closing.",
    kinds=FACT_EVENTS,
    partitioned=True,
)
DELIVERIES: Final = ConsumerDeclaration(
    SERVICE,
    "deliveries",
    Context.DELIVERIES,
    "Reads pending deliveries to decide when and how to say them; its own decisions and"
    " requeues it folds as it appends them.",
    kinds=CONSUMED_DELIVERY_EVENTS,
    partitioned=True,
)

CONSUMERS: Final = (INTERACTION, OPERATIONS, DELIVERIES)

PUBLICATIONS: Final = (
    Publication(SERVICE, Context.DELIVERIES, "Records delivery decisions and outcomes."),
)
