"""What the `holdline` operator command appends on the bus, for the AsyncAPI document
(`make proto`; the services declare theirs in `services/<name>/consumers.py`)."""

from __future__ import annotations

from typing import Final

from libs.bus import Context
from libs.events import OperationCommitted, OperationFailedFinal
from libs.roles import Publication

SERVICE: Final = "holdline-operator"

PUBLICATIONS: Final = (
    Publication(
        SERVICE,
        Context.WORK,
        "Re-drives dead-lettered operations as work commands (`holdline dlq redrive`).",
    ),
    Publication(
        SERVICE,
        Context.OPERATIONS,
        "Resolves by hand an operation stuck in unknown (`holdline resolve`).",
        only=(OperationCommitted, OperationFailedFinal),
    ),
)
