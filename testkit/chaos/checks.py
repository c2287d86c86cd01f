"""The end-of-run invariants, computed from a fresh replay of the streams and the provider ledger.

Nothing here trusts a service's memory: the streams are read from the start by a new
connection, folded with the domain's own `evolve` functions, and compared with the ledger,
with what the surface acknowledged, with what clients saw, and with the surface's live view.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import msgspec
from nats.js import JetStreamContext

from libs.bus import Context, Topology, replay
from libs.domain import TERMINAL, Projection, batch, delivery, operation, session
from libs.domain.delivery import DeliveryState, DeliveryStatus
from libs.domain.operation import OperationState
from libs.events import (
    BATCHES,
    DELIVERIES,
    INTERACTION,
    OPERATIONS,
    Envelope,
    EventCodec,
    TurnReplied,
)
from libs.operator.rebuild import rebuild
from libs.tools import ToolRegistry, default_registry
from services.interaction_surface.core.snapshot import (
    batch_view,
    delivery_view,
    message_view,
    operation_view,
)

from .driver import Acked, carried

_SHOWN = frozenset({DeliveryStatus.DELIVERED, DeliveryStatus.SPOKEN})
# Still on its way to the user: after quiescence none may be left.
OPEN = frozenset({DeliveryStatus.PENDING, DeliveryStatus.WAITING, DeliveryStatus.SENT})


@dataclass
class Replayed:
    """Every aggregate rebuilt from scratch, plus the turn ids the interaction stream holds."""

    operations: dict[str, OperationState]
    batches: dict[str, batch.BatchState]
    deliveries: dict[str, DeliveryState]
    sessions: dict[str, session.SessionState]
    turn_ids: set[str]
    # Per delivery, how many replies carry its text (its own message or attached to a turn's).
    written: Counter[str]
    events: int
    undecodable: int
    refused: int


# Each projected stream: its codec, its fold, and the aggregate id an event belongs to.
_SOURCES: tuple[
    tuple[Context, EventCodec[Any], Callable[[Any, Envelope[Any]], Any], Callable[..., str]], ...
] = (
    (Context.OPERATIONS, OPERATIONS, operation.evolve, lambda e: e.operation_id or ""),
    (Context.BATCHES, BATCHES, batch.evolve, lambda e: e.batch_id or ""),
    (Context.DELIVERIES, DELIVERIES, delivery.evolve, lambda e: e.delivery_id or ""),
    (Context.INTERACTION, INTERACTION, session.evolve, lambda e: e.session_id),
)


async def replay_all(js: JetStreamContext, topology: Topology) -> Replayed:
    """Fold the four projected streams from their first message."""
    folded: dict[Context, Projection[Any, Any]] = {}
    turn_ids: set[str] = set()
    written: Counter[str] = Counter()
    events = undecodable = 0
    for context, codec, evolve, key in _SOURCES:
        read = await replay(
            js, topology.stream_name(context), topology.context_filter(context), codec,
            timeout_s=10.0,
        )
        projection: Projection[Any, Any] = Projection(evolve, key)
        for item in read.items:
            projection.apply(item.envelope, item.stream_seq)
            env = item.envelope
            if context is Context.INTERACTION and env.turn_id:
                turn_ids.add(env.turn_id)
            if isinstance(env.event, TurnReplied):
                written.update(carried(env.delivery_id, env.event.attached_delivery_ids))
        folded[context] = projection
        events += len(read.items)
        undecodable += len(read.rejected)
    return Replayed(
        operations=folded[Context.OPERATIONS].states,
        batches=folded[Context.BATCHES].states,
        deliveries=folded[Context.DELIVERIES].states,
        sessions=folded[Context.INTERACTION].states,
        turn_ids=turn_ids,
        written=written,
        events=events,
        undecodable=undecodable,
        refused=sum(len(p.refused) for p in folded.values()),
    )


@dataclass
class Verdict:
    """Figures and every violation found, each with enough ids to look it up."""

    figures: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def fail(self, kind: str, detail: str) -> None:
        """Record one violation."""
        self.violations.append(f"{kind}: {detail}")

    def by_kind(self) -> Counter[str]:
        """Violations counted by kind."""
        return Counter(v.split(":", 1)[0] for v in self.violations)


def check_effects(
    verdict: Verdict,
    ops: dict[str, OperationState],
    ledger: list[dict[str, Any]],
    records: dict[str, dict[str, Any]],
) -> None:
    """committed -> exactly 1 effect; rejected, cancelled, failed_final -> none; all terminal.

    A compensation (an undo: `compensates` is set) adds no effect of its own; committed, the
    provider's record it names must show the original effect compensated.
    """
    effects: Counter[str] = Counter()
    for entry in ledger:
        effects[str(entry["key"])] += int(entry["effects"])
    compensations = 0
    for op_id, op in ops.items():
        status = op.status.value
        if op.status not in TERMINAL:
            verdict.fail("not_terminal", f"{op_id} is {status}")
        elif op.compensates is not None:
            compensations += 1
            record = records.get(op.provider_ref or "")
            if effects[op_id]:
                verdict.fail("effects", f"compensation {op_id} with {effects[op_id]} effects")
            if status == "committed" and (record is None or not record.get("compensated_at")):
                verdict.fail("compensation", f"{op_id} committed, record {op.provider_ref} intact")
        elif status == "committed" and effects[op_id] != 1:
            verdict.fail("effects", f"{op_id} committed with {effects[op_id]} effects")
        elif status != "committed" and effects[op_id] != 0:
            verdict.fail("effects", f"{op_id} {status} with {effects[op_id]} effects")
    orphans = [k for k, n in effects.items() if n and k not in ops]
    for key in orphans:
        verdict.fail("orphan_effect", f"ledger key {key} matches no operation")
    verdict.figures["effects"] = sum(effects.values())
    verdict.figures["compensations"] = compensations
    by_status = Counter(o.status.value for o in ops.values())
    verdict.figures["operations"] = dict(sorted(by_status.items()))


def check_batches(verdict: Verdict, state: Replayed) -> None:
    """One final delivery per batch whose members are terminal; at most one closing message."""
    finals: dict[str, list[str]] = {}
    for d in state.deliveries.values():
        if d.kind == "final" and d.batch_id:
            finals.setdefault(d.batch_id, []).append(d.delivery_id)
    messages = state.written
    settled = 0
    for batch_id, b in state.batches.items():
        members = [state.operations.get(m) for m in b.members]
        if not all(m is not None and m.status in TERMINAL for m in members):
            continue
        settled += 1
        found = finals.get(batch_id, [])
        if len(found) != 1:
            verdict.fail("final_deliveries", f"batch {batch_id} has {len(found)} final deliveries")
        closing = sum(messages[d] for d in found)
        if closing > 1:
            verdict.fail("closings", f"batch {batch_id} closed {closing} times in history")
    for delivery_id, n in messages.items():
        if n > 1:
            verdict.fail("duplicate_message", f"delivery {delivery_id} written {n} times")
    verdict.figures["batches"] = len(state.batches)
    verdict.figures["batches_settled"] = settled
    verdict.figures["final_deliveries"] = sum(len(v) for v in finals.values())


def check_deliveries(verdict: Verdict, state: Replayed, seen: set[str]) -> None:
    """Delivered/spoken only when the message is in history and a client was shown it."""
    in_history = set(state.written)
    for d in state.deliveries.values():
        if d.status not in _SHOWN:
            if d.status in OPEN:
                verdict.fail("delivery_open", f"{d.delivery_id} still {d.status.value}")
            continue
        if d.delivery_id not in in_history:
            verdict.fail("unwritten_delivery", f"{d.delivery_id} {d.status.value}, not in history")
        if d.delivery_id not in seen:
            verdict.fail("unseen_delivery", f"{d.delivery_id} {d.status.value}, no client saw it")
    verdict.figures["deliveries"] = dict(
        sorted(Counter(d.status.value for d in state.deliveries.values()).items())
    )
    verdict.figures["deliveries_seen_by_clients"] = len(seen)


def check_acknowledged(verdict: Verdict, state: Replayed, acked: Acked) -> None:
    """Everything the surface answered 2xx for is in the streams."""
    for session_id in acked.tokens:
        if session_id not in state.sessions:
            verdict.fail("lost_ack", f"session {session_id}")
    for turn_id in acked.turns:
        if turn_id not in state.turn_ids:
            verdict.fail("lost_ack", f"turn {turn_id}")
    for op_id in acked.operations:
        if op_id not in state.operations:
            verdict.fail("lost_ack", f"operation {op_id}")
    verdict.figures["acknowledged"] = {
        "sessions": len(acked.tokens),
        "turns": len(acked.turns),
        "operations": len(acked.operations),
    }


def _json(value: dict[str, Any]) -> dict[str, Any]:
    # Enums, tuples and read-only mappings become what the API's JSON shows.
    decoded: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(value))
    return decoded


@functools.cache
def _labels() -> ToolRegistry:
    # The chaos system runs the demo tools only, as this process's registry has them.
    return default_registry()


def rebuilt_view(state: Replayed, session_id: str) -> dict[str, Any]:
    """The parts of a snapshot that the projections determine, from the replayed state."""
    sess = state.sessions[session_id]
    return _json(
        {
            "messages": [
                message_view(m.role, m.text, m.turn_id, m.delivery_id) for m in sess.messages
            ],
            "operations": sorted(
                # Labelled as the surface labels them: from the tools' declarations.
                (operation_view(o, _labels().label) for o in state.operations.values()
                 if o.session_id == session_id),
                key=lambda v: v["operation_id"],
            ),
            "batches": sorted(
                (batch_view(b) for b in state.batches.values() if b.session_id == session_id),
                key=lambda v: v["batch_id"],
            ),
            "deliveries": sorted(
                (delivery_view(d) for d in state.deliveries.values()
                 if d.session_id == session_id),
                key=lambda v: v["delivery_id"],
            ),
        }
    )


def live_view(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The same parts of the surface's live snapshot."""
    return {
        "messages": snapshot["messages"],
        "operations": sorted(snapshot["operations"], key=lambda v: v["operation_id"]),
        "batches": sorted(snapshot["batches"], key=lambda v: v["batch_id"]),
        "deliveries": sorted(snapshot["deliveries"], key=lambda v: v["delivery_id"]),
    }


async def check_projections(
    verdict: Verdict,
    state: Replayed,
    acked: Acked,
    *,
    http: httpx.AsyncClient,
    js: JetStreamContext,
    topology: Topology,
) -> None:
    """The surface's live snapshots equal views rebuilt from scratch; so do operator counts."""
    compared = 0
    for session_id, token in acked.tokens.items():
        if session_id not in state.sessions:
            continue
        response = await http.get(
            f"/v1/sessions/{session_id}", headers={"Authorization": f"Bearer {token}"}
        )
        if response.status_code != 200:
            verdict.fail("snapshot", f"{session_id}: {response.status_code}")
            continue
        live = live_view(response.json())
        rebuilt = rebuilt_view(state, session_id)
        compared += 1
        for part in ("messages", "operations", "batches", "deliveries"):
            if live[part] != rebuilt[part]:
                verdict.fail("projection_mismatch", f"{session_id} {part}")
    verdict.figures["snapshots_compared"] = compared
    # The operator's rebuild reads every stream cleanly and agrees with the replay.
    expected = {
        "operations": Counter(o.status.value for o in state.operations.values()),
        "deliveries": Counter(d.status.value for d in state.deliveries.values()),
    }
    for name, counts in expected.items():
        out = await rebuild(js, topology, name, None)  # type: ignore[arg-type]
        if dict(out.by_status) != dict(counts) or out.undecodable or out.refused:
            verdict.fail(
                "operator_rebuild",
                f"{name}: rebuilt {dict(out.by_status)} ({out.undecodable} undecodable, "
                f"{out.refused} refused) vs replay {dict(counts)}",
            )
    if state.undecodable:
        verdict.fail("undecodable", f"{state.undecodable} stored events do not decode")
    verdict.figures["events"] = state.events
    verdict.figures["refused_events"] = state.refused
