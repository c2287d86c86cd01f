"""Resolving by hand an operation stuck in UNKNOWN that the provider cannot reconcile."""

from __future__ import annotations

from typing import Literal

from libs.bus import ConcurrencyConflict, EventStore, Repository, Topology, aggregates
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.domain import OperationState, OpStatus, operation
from libs.events import OperationCommitted, OperationEvent, OperationFailedFinal

from .deadletters import OperatorError

# What an operator says an UNKNOWN operation became.
Resolution = Literal["committed", "failed"]


def resolution(state: OperationState, outcome: Resolution, who: str, why: str) -> OperationEvent:
    """The event that records an operator's decision, with who decided and why."""
    if outcome == "committed":
        return OperationCommitted(
            result={"resolved_by": who, "reason": why},
            provider_ref=state.provider_ref,
            via="operator",
        )
    return OperationFailedFinal(
        reason="operator", detail=f"resolved by {who}: {why}", via="operator"
    )


async def resolve(
    store: EventStore,
    topology: Topology,
    session_id: str,
    operation_id: str,
    outcome: Resolution,
    *,
    who: str,
    why: str,
    clock: Clock = SYSTEM_CLOCK,
    ids: Ids = RANDOM_IDS,
) -> tuple[OperationState, int]:
    """Append the operator's verdict on an UNKNOWN operation; refuse any other state."""
    if not who.strip() or not why.strip():
        raise OperatorError("--by and --why must both say something")
    subject = topology.operation_subject(session_id, operation_id)
    operations = Repository(store, aggregates.operations(topology), clock=clock, ids=ids)
    loaded = await operations.load(subject)
    state = loaded.state
    if state is None:
        raise OperatorError(f"operation {session_id}/{operation_id} has no events")
    if state.status is not OpStatus.UNKNOWN:
        raise OperatorError(
            f"operation {operation_id} is {state.status.value}, not unknown: only an UNKNOWN "
            "operation is resolved by hand"
        )
    env = operation.envelope_for(
        state,
        resolution(state, outcome, who, why),
        event_id=ids.new("ev"),
        now=clock.now(),
    )
    try:
        # One decision on what the operator saw: a change meanwhile is theirs to look at.
        ack = await operations.append(subject, env, expected=loaded.last_seq)
    except ConcurrencyConflict:
        raise OperatorError(
            f"operation {operation_id} changed while resolving it; look again and retry"
        ) from None
    return operation.evolve(state, env), ack.seq
