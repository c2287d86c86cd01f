"""Shared by the hostile-input tests: sample events, junk JSON, and the closing probes."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
from hypothesis import strategies as st

from libs.bus import Context
from libs.events import (
    BATCHES,
    CONTROL,
    DELIVERIES,
    INTERACTION,
    OPERATIONS,
    WORK,
    BargeIn,
    BatchEvent,
    BatchOpened,
    ControlEvent,
    DeliveryEvent,
    DeliveryReady,
    EventCodec,
    ExecuteOperation,
    InteractionEvent,
    OperationCommitted,
    OperationEvent,
    UserActivity,
    WorkCommand,
)
from testkit.events import envelope
from testkit.surface import Chat, SurfaceStack, effects, eventually, unique

# A stream's codec, its union of event types, and one valid event of it.
Stream = tuple[EventCodec[Any], Any, Any]
STREAMS: dict[Context, Stream] = {
    Context.INTERACTION: (INTERACTION, InteractionEvent, UserActivity(typing=True)),
    Context.CONTROL: (CONTROL, ControlEvent, BargeIn(played_ms=1, unheard_ms=2)),
    Context.OPERATIONS: (
        OPERATIONS, OperationEvent, OperationCommitted(result={"ok": 1}, provider_ref="acc_1")
    ),
    Context.BATCHES: (BATCHES, BatchEvent, BatchOpened(operation_ids=("op1",))),
    Context.DELIVERIES: (
        DELIVERIES,
        DeliveryEvent,
        DeliveryReady(kind="final", text="done", short_text="ok", source_operation_ids=("o",)),
    ),
    Context.WORK: (WORK, WorkCommand, ExecuteOperation()),
}

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
# Any JSON value, small.
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def valid(codec: EventCodec[Any], event: Any) -> dict[str, Any]:
    """A valid envelope of the stream as a plain JSON object."""
    obj: dict[str, Any] = msgspec.json.decode(
        codec.encode(envelope(event, session_id="s1", operation_id="op1"))
    )
    assert codec.decode(msgspec.json.encode(obj)).event == event
    return obj


async def healthy(stack: SurfaceStack) -> None:
    """Every process still answers /readyz."""
    async with httpx.AsyncClient(timeout=10.0) as http:
        for proc in stack.procs.values():
            assert (await http.get(f"{proc.base_url}/readyz")).status_code == 200, proc.package


async def completes_a_tool_call(stack: SurfaceStack, chat: Chat) -> None:
    """A session opened before the attack still runs a turn to a committed, single effect."""
    name = unique("wiki")
    answer = await chat.say(f"give me access to {name}")
    assert [op["tool"] for op in answer["operations"]] == ["provision_access"]

    async def committed() -> bool:
        ops = (await chat.snapshot())["operations"]
        return bool(ops) and all(op["status"] == "committed" for op in ops)

    await eventually(committed, timeout_s=30)
    assert await effects(stack, name) == 1
