"""Which stored message seeds an operation's execution, and how its events group (no broker)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from libs.bus import Topology, appended_to_empty
from libs.domain import OpStatus
from libs.events import (
    Envelope,
    OperationAdmitted,
    OperationCancelRequested,
    OperationEvent,
)
from services.operation_worker.consumers import DISPATCH
from services.operation_worker.domain import seeded


def _admitted_env(**ids: Any) -> Envelope[OperationEvent]:
    return Envelope(
        event_id="ev-1",
        occurred_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        session_id="s1",
        operation_id="op1",
        batch_id="b1",
        intent_key="ik",
        event=OperationAdmitted(
            tool="provision_access", arguments={"access": "github"}, tenant_id="acme", user_id="u"
        ),
        **ids,
    )


# -- the pure parts ------------------------------------------------------------------------
def test_an_admitted_first_event_is_the_state_and_its_stream_sequence_the_one_to_append_after(
) -> None:
    found = seeded(_admitted_env(), stream_seq=41, first=True)
    assert found is not None
    state, seq = found
    assert seq == 41
    assert state.status is OpStatus.ADMITTED
    assert (state.operation_id, state.session_id, state.batch_id) == ("op1", "s1", "b1")
    assert state.tool == "provision_access"
    assert state.arguments == {"access": "github"}
    assert state.tenant_id == "acme"
    assert state.attempts == 0
    assert state.admitted_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_nothing_but_an_admitted_first_event_is_a_seed() -> None:
    # Appended after other events (a confirmation) or blindly: what came before is unknown.
    assert seeded(_admitted_env(), stream_seq=41, first=False) is None
    cancel: Envelope[OperationEvent] = msgspec.structs.replace(
        _admitted_env(), event=OperationCancelRequested(requested_by="user", reason="no")
    )
    assert seeded(cancel, stream_seq=41, first=True) is None


def test_only_a_message_stored_under_the_empty_guard_of_its_operation_is_a_first() -> None:
    wildcard = Topology("hl").operation_subject("s1", "op1")
    guard = "Nats-Expected-Last-Subject-Sequence"
    on = "Nats-Expected-Last-Subject-Sequence-Subject"
    assert appended_to_empty({guard: "0", on: wildcard}, wildcard)
    assert not appended_to_empty({guard: "3", on: wildcard}, wildcard)
    assert not appended_to_empty({guard: "0"}, wildcard)
    assert not appended_to_empty({guard: "0", on: "hl.operations.s1.other.*"}, wildcard)
    assert not appended_to_empty({"Nats-Msg-Id": "x"}, wildcard)
    assert not appended_to_empty(None, wildcard)
    assert appended_to_empty({guard: "0"}, "hl.batches.s1.b1")


def test_an_operations_events_are_one_group_whatever_their_kind() -> None:
    # The grouping the worker's dispatch consumer is declared with.
    per_operation = DISPATCH.grouping.group_by()
    assert per_operation is not None
    topology = Topology("hl")
    admitted = topology.operation_event_subject("s1", "op1", "admitted")
    cancel = topology.operation_event_subject("s1", "op1", "cancel_requested")
    other = topology.operation_event_subject("s1", "op2", "admitted")
    assert per_operation(admitted) == per_operation(cancel) == "hl.operations.s1.op1"
    assert per_operation(other) != per_operation(admitted)
