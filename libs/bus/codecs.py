"""The codec of each event stream, so readers of several streams share one table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from libs.events import BATCHES, CONTROL, DELIVERIES, INTERACTION, OPERATIONS, EventCodec

from .topology import Context

EVENT_CODECS: Final[Mapping[Context, EventCodec[Any]]] = {
    Context.INTERACTION: INTERACTION,
    Context.CONTROL: CONTROL,
    Context.OPERATIONS: OPERATIONS,
    Context.BATCHES: BATCHES,
    Context.DELIVERIES: DELIVERIES,
}
