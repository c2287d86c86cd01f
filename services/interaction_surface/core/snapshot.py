"""Pure views over the projections: the snapshot, timeline items and operation labels.

No I/O here: the API and the WebSocket call these with what the live view holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from libs.bus import Context
from libs.domain import BatchState, DeliveryState, OperationState, SessionState
from libs.domain.sync_mode import sync_mode
from libs.tools.labels import label_of

from .session_log import Entry, encode_cursor

# Same instant: a batch opens before its operations are admitted, which come before results.
_TIE = {
    Context.INTERACTION: 0,
    Context.CONTROL: 1,
    Context.BATCHES: 2,
    Context.OPERATIONS: 3,
    Context.DELIVERIES: 4,
}
# Fields of an event that never leave the service (the token's hash is a credential).
_SECRET_FIELDS = frozenset({"token_hash"})
_ID_FIELDS = (
    "event_id",
    "session_id",
    "turn_id",
    "response_id",
    "tool_call_id",
    "operation_id",
    "intent_key",
    "subject_key",
    "batch_id",
    "delivery_id",
    "playback_id",
    "agent",
    "causation_id",
)


def message_view(
    role: str, text: str, turn_id: str | None, delivery_id: str | None
) -> dict[str, Any]:
    """One visible message as the API shows it."""
    return {"role": role, "text": text, "turn_id": turn_id, "delivery_id": delivery_id}


Labeller = Callable[[str, Mapping[str, Any]], str]


def generic_label(_tool: str, arguments: Mapping[str, Any]) -> str:
    """A label without the tool's declaration (its first few scalar arguments)."""
    return label_of(None, arguments)


def operation_view(op: OperationState, label: Labeller = generic_label) -> dict[str, Any]:
    """One operation as the snapshot shows it (the contract's fields, then extras)."""
    return {
        "operation_id": op.operation_id,
        "tool": op.tool,
        "status": op.status.value,
        "batch_id": op.batch_id,
        "intent_key": op.intent_key,
        "attempts": op.attempts,
        "label": label(op.tool, op.arguments),
        "turn_id": op.turn_id,
        "agent": op.agent,
        "failure": op.failure,
        "compensates": op.compensates,
        "compensated_by": op.compensated_by,
    }


def batch_view(b: BatchState) -> dict[str, Any]:
    """One batch: members, which settled how, and its closing delivery once it exists."""
    return {
        "batch_id": b.batch_id,
        "turn_id": b.turn_id,
        "agent": b.agent,
        "operation_ids": list(b.members),
        "settled": dict(b.settled),
        "drained": b.drained,
        "closed": b.closed,
        "final_delivery_id": b.final_delivery_id,
    }


def delivery_view(d: DeliveryState) -> dict[str, Any]:
    """One delivery: status, mode and the policy's latest reason."""
    return {
        "delivery_id": d.delivery_id,
        "batch_id": d.batch_id,
        "status": d.status.value,
        "mode": d.mode,
        "reason": d.reason,
        "kind": d.kind,
        "decision": d.decision,
        "priority": d.priority,
        "text": d.text,
    }


def build_snapshot(
    state: SessionState,
    operations: Sequence[OperationState],
    batches: Sequence[BatchState],
    deliveries: Sequence[DeliveryState],
    cursor: tuple[int, ...] | None = None,
    *,
    label: Labeller = generic_label,
) -> dict[str, Any]:
    """The session snapshot of docs/contract.md §6 (`label` words operations, from their
    declarations)."""
    snapshot: dict[str, Any] = {
        "session_id": state.session_id,
        "agent": state.agent,
        "sync_mode": sync_mode(batches, deliveries),
        "messages": [
            message_view(m.role, m.text, m.turn_id, m.delivery_id) for m in state.messages
        ],
        "operations": [operation_view(o, label) for o in operations],
        "batches": [batch_view(b) for b in batches],
        "deliveries": [delivery_view(d) for d in deliveries],
    }
    if cursor is not None:
        snapshot["cursor"] = encode_cursor(cursor)
    return snapshot


def event_type(entry: Entry) -> str:
    """The dotted type of an entry's event."""
    return str(entry.envelope.event.__struct_config__.tag)


def timeline_item(entry: Entry) -> dict[str, Any]:
    """One event with every id it carries, its stream position and its data (no secrets)."""
    env = entry.envelope
    data = msgspec.to_builtins(env.event)
    if isinstance(data, dict):
        data.pop("type", None)
        for name in _SECRET_FIELDS:
            data.pop(name, None)
    item: dict[str, Any] = {
        "type": event_type(entry),
        "stream": entry.stream.value,
        "seq": entry.seq,
        "cursor": encode_cursor(entry.cursor),
        "occurred_at": env.occurred_at.isoformat(),
    }
    for name in _ID_FIELDS:
        value = getattr(env, name)
        if value is not None:
            item[name] = value
    item["data"] = data
    return item


def causal_order(entries: Iterable[Entry]) -> list[Entry]:
    """Entries by time, with every event placed after the event that caused it.

    Clocks of different processes can disagree by a little; a cause is never shown after
    its effect whatever the clocks say.
    """
    ordered = sorted(entries, key=lambda e: (e.envelope.occurred_at, _TIE[e.stream], e.seq))
    placed: list[Entry] = []
    seen: set[str] = set()
    waiting: dict[str, list[Entry]] = {}
    ids = {e.envelope.event_id for e in ordered}

    def place(entry: Entry) -> None:
        placed.append(entry)
        seen.add(entry.envelope.event_id)
        for child in waiting.pop(entry.envelope.event_id, []):
            place(child)

    for entry in ordered:
        cause = entry.envelope.causation_id
        if cause and cause in ids and cause not in seen:
            waiting.setdefault(cause, []).append(entry)
        else:
            place(entry)
    # Causes that form a cycle (impossible with honest writers) still appear.
    for children in waiting.values():
        placed.extend(c for c in children if c.envelope.event_id not in seen)
    return placed
