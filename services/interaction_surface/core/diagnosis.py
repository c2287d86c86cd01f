"""Answers to the seed's production questions about one session, from its timeline alone.

Pure: it reads timeline items (`snapshot.timeline_item`, in causal order) and returns a JSON
document; no I/O and no clock. The questions:

- `duplicates`: was one request asked for more than once, and by whom? The model (the
  same operation named twice in one turn's calls), the user or model in a later turn (an
  earlier operation named again), one intent admitted as several operations (an explicitly
  confirmed repeat), or our own retries (several attempts of one operation, all under the
  one idempotency key, which is the operation id).
- `unconfirmed_closings`: a closing said (delivered or spoken) while one of its source
  operations was not terminal yet, or about operations that did not commit. The first is a
  broken promise; the second is honest only if the closing says so (the summaries do).
- `after_barge_in`: operations open at a barge-in that ended after it (a barge-in cancels
  speech, never business: they keep running) and how they ended.
- `handoff_losses`: results the policy suppressed because of a handoff (an agent-owned
  result no longer allowed), with the handoff that caused it.
- `unknown`: operations that entered UNKNOWN, whether a reconcile resolved them, and how
  many workers touched them (more than one: a worker died or restarted mid-operation).

`answers` sums each question up as a yes/no for the demo page.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

Item = dict[str, Any]

_TERMINAL = {
    "operation.committed": "committed",
    "operation.failed_final": "failed_final",
    "operation.cancelled": "cancelled",
    "operation.rejected": "rejected",
}
_SAID = {"delivery.delivered": "delivered", "delivery.spoken": "spoken"}
_HANDOFF_REASONS = ("agent_not_allowed", "handoff")


@dataclass
class _Op:
    operation_id: str
    tool: str = ""
    intent_key: str | None = None
    status: str = "requested"
    ended_at: str | None = None
    attempts: int = 0
    retries: int = 0
    workers: list[str] = field(default_factory=list)
    unknown_at: str | None = None
    resolution: str | None = None


def _base_intent(key: str | None) -> str | None:
    # An explicitly confirmed repeat is admitted under `<intent>~<operation>`.
    return key.split("~", 1)[0] if key else None


def diagnose(items: Sequence[Item]) -> dict[str, Any]:
    """The diagnosis of one session from its timeline items (causal order)."""
    ops: dict[str, _Op] = {}
    status_at: dict[str, str] = {}
    turn_ops: list[tuple[str, list[str]]] = []
    sources: dict[str, list[str]] = {}
    batches: dict[str, str | None] = {}
    closings: list[dict[str, Any]] = []
    barge_ins: list[tuple[str, list[str]]] = []
    handoffs: list[Item] = []
    handoff_losses: list[dict[str, Any]] = []

    for item in items:
        kind = str(item.get("type", ""))
        data: dict[str, Any] = item.get("data") or {}
        at = str(item.get("occurred_at", ""))
        op_id = item.get("operation_id")
        if kind.startswith("operation.") and isinstance(op_id, str):
            op = ops.setdefault(op_id, _Op(op_id))
            op.tool = str(data.get("tool") or op.tool)
            op.intent_key = item.get("intent_key") or op.intent_key
            _apply_operation(op, kind, data, at)
            status_at[op_id] = op.status
        elif kind == "turn.replied":
            turn_ops.append((str(item.get("turn_id") or ""), list(data.get("operation_ids", []))))
        elif kind == "delivery.ready" and data.get("kind") == "final":
            delivery = str(item.get("delivery_id"))
            sources[delivery] = list(data.get("source_operation_ids", []))
            batches[delivery] = item.get("batch_id")
        elif kind in _SAID and item.get("delivery_id") in sources:
            delivery = str(item["delivery_id"])
            snapshot = {o: status_at.get(o, "unknown") for o in sources[delivery]}
            closings.append(
                {"delivery_id": delivery, "batch_id": batches.get(delivery),
                 "said": _SAID[kind], "at": at, "operations": snapshot}
            )
        elif kind == "control.barge_in":
            open_ops = [o for o, s in status_at.items() if s not in _TERMINAL.values()]
            barge_ins.append((at, open_ops))
        elif kind == "agent.handed_off":
            handoffs.append(item)
        elif kind == "delivery.suppressed":
            reason = str(data.get("reason", ""))
            if reason.startswith(_HANDOFF_REASONS):
                last = handoffs[-1] if handoffs else None
                handoff_losses.append(
                    {
                        "delivery_id": item.get("delivery_id"),
                        "batch_id": item.get("batch_id"),
                        "reason": reason,
                        "at": at,
                        "handoff": None if last is None else {
                            "from_agent": (last.get("data") or {}).get("from_agent"),
                            "to_agent": (last.get("data") or {}).get("to_agent"),
                            "context": (last.get("data") or {}).get("context"),
                            "at": last.get("occurred_at"),
                        },
                    }
                )

    duplicates = _duplicates(ops, turn_ops)
    unconfirmed = [
        {
            **c,
            "said_before_terminal": sorted(
                o for o, s in c["operations"].items() if s not in _TERMINAL.values()
            ),
            "not_committed": sorted(
                o for o, s in c["operations"].items() if ops.get(o, _Op(o)).status != "committed"
            ),
        }
        for c in closings
    ]
    unconfirmed = [c for c in unconfirmed if c["said_before_terminal"] or c["not_committed"]]
    after_barge_in = [
        {
            "barge_in_at": at,
            "operation_id": o,
            "tool": ops[o].tool,
            "status": ops[o].status,
            "ended_at": ended,
        }
        for at, open_ops in barge_ins
        for o in open_ops
        if (ended := ops[o].ended_at) is not None and ended >= at
    ]
    unknown = [
        {
            "operation_id": op.operation_id,
            "tool": op.tool,
            "since": op.unknown_at,
            "resolved": op.resolution is not None,
            "resolution": op.resolution,
            "status": op.status,
            "workers": len(op.workers),
        }
        for op in ops.values()
        if op.unknown_at is not None
    ]
    return {
        "answers": {
            "model_duplicated_a_request": any(d["by"] == "model" for d in duplicates),
            "request_repeated_in_a_later_turn": any(d["by"] == "later_turn" for d in duplicates),
            "our_retries_sent_again": any(d["by"] == "retry" for d in duplicates),
            "closing_said_before_commit": any(c["said_before_terminal"] for c in unconfirmed),
            "operation_ended_after_barge_in": bool(after_barge_in),
            "handoff_lost_a_result": bool(handoff_losses),
            "unknown_left_unresolved": any(not u["resolved"] for u in unknown),
        },
        "duplicates": duplicates,
        "unconfirmed_closings": unconfirmed,
        "after_barge_in": after_barge_in,
        "handoff_losses": handoff_losses,
        "unknown": unknown,
    }


def _apply_operation(op: _Op, kind: str, data: dict[str, Any], at: str) -> None:
    if kind == "operation.committed" and data.get("attempt") is not None:
        # A successful attempt is recorded in its commit, not in an operation.attempted.
        op.attempts += 1
    if kind in _TERMINAL:
        op.status = _TERMINAL[kind]
        op.ended_at = at
        if op.unknown_at is not None and op.resolution is None:
            op.resolution = op.status
        return
    match kind:
        case "operation.admitted" | "operation.confirmed":
            op.status = "admitted"
        case "operation.awaiting_confirmation":
            op.status = "awaiting_confirmation"
        case "operation.started":
            op.status = "running"
            worker = str(data.get("worker_id", ""))
            if worker and worker not in op.workers:
                op.workers.append(worker)
        case "operation.attempted":
            op.attempts += 1
        case "operation.retry_scheduled":
            op.retries += 1
            op.status = "failed_retryable"
        case "operation.unknown":
            op.status = "unknown"
            op.unknown_at = op.unknown_at or at
            op.resolution = None
        case "operation.reconciled":
            if op.unknown_at is not None:
                op.resolution = "reconciled"
        case "operation.cancel_requested":
            op.status = "cancel_requested"


def _duplicates(ops: dict[str, _Op], turn_ops: list[tuple[str, list[str]]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    first_turn: dict[str, str] = {}
    for turn, named in turn_ops:
        for op_id, times in Counter(named).items():
            if times > 1:
                found.append(
                    {"by": "model", "operation_id": op_id, "tool": _tool(ops, op_id),
                     "turn_id": turn, "times": times}
                )
            if op_id in first_turn and first_turn[op_id] != turn:
                found.append(
                    {"by": "later_turn", "operation_id": op_id, "tool": _tool(ops, op_id),
                     "turn_id": turn, "first_turn_id": first_turn[op_id]}
                )
            first_turn.setdefault(op_id, turn)
    by_intent: defaultdict[str, list[str]] = defaultdict(list)
    for op in ops.values():
        base = _base_intent(op.intent_key)
        if base:
            by_intent[base].append(op.operation_id)
    for intent, members in by_intent.items():
        if len(members) > 1:
            found.append(
                {"by": "confirmed_repeat", "intent_key": intent, "operation_ids": members,
                 "tool": _tool(ops, members[0])}
            )
    found.extend(
        {"by": "retry", "operation_id": op.operation_id, "tool": op.tool,
         "attempts": op.attempts, "idempotency_key": op.operation_id}
        for op in ops.values()
        if op.attempts > 1
    )
    return found


def _tool(ops: dict[str, _Op], op_id: str) -> str:
    found = ops.get(op_id)
    return found.tool if found is not None else ""
