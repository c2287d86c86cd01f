"""The coordinator's member view words every closing as the operation's full state would.

The coordinator folds only the kinds in `COORDINATED` into a `MemberView`, with what
`batch.opened` names of each member (tool, arguments, priority: the admission's words,
which it is no longer delivered); the closing read `OperationState` (every kind through the
state machine) before. Every legal history of an operation, walked through the state
machine, must give the same outcome and priority from both, and the view must take any
order, a duplicate and a kind it does not read.
"""

from __future__ import annotations

import itertools
import typing
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import msgspec

from libs.domain import BatchState, OperationState
from libs.domain import operation as operation_domain
from libs.domain.batch import member_status
from libs.events import (
    Envelope,
    OperationAdmitted,
    OperationAttempted,
    OperationAwaitingConfirmation,
    OperationCancelled,
    OperationCancelRefused,
    OperationCancelRequested,
    OperationCommitted,
    OperationCompensated,
    OperationConfirmed,
    OperationDeadLettered,
    OperationEvent,
    OperationFailedFinal,
    OperationProgress,
    OperationReconciled,
    OperationRejected,
    OperationRequested,
    OperationRetryScheduled,
    OperationStarted,
    OperationUnknown,
)
from libs.models import OperationOutcome
from libs.tools import ToolDeclaration
from services.batch_coordinator.domain import (
    COORDINATED,
    MemberView,
    evolve_member,
    opened_from_batch,
    outcome_of,
    priority_of,
)
from testkit.events import envelope

ALL: tuple[type[Any], ...] = typing.get_args(OperationEvent)
AT = datetime(2026, 1, 1, tzinfo=UTC)


class _Args(msgspec.Struct):
    who: str = ""


def _declaration(name: str) -> ToolDeclaration:
    # A label from the arguments and a success line from the result: both words depend on
    # what each fold kept.
    return ToolDeclaration(
        name=name,
        description="a tool",
        arguments=_Args,
        executor="noop",
        label=lambda a: f"{name} for {a['who']}",
        closing=lambda a, r: f"{name} {r['id']} for {a['who']} is done.",
    )


DECLARATIONS = {name: _declaration(name) for name in ("asked", "booked", "refused")}

# Each kind with values that tell the folds apart (a result, distinct failures, an urgent
# admission); several where the words branch (a result without the closing's field, a
# rejection without a tool name, a final failure without detail).
SAMPLES: tuple[OperationEvent, ...] = (
    OperationRequested(tool="asked", arguments={"who": "ana"}),
    OperationAwaitingConfirmation(prompt="sure?"),
    OperationConfirmed(),
    OperationAdmitted(tool="booked", arguments={"who": "bo"}, tenant_id="t", user_id="u",
                      priority="urgent"),
    OperationAdmitted(tool="booked", arguments={"who": "cy"}, tenant_id="t", user_id="u",
                      idempotent=False),
    OperationRejected(tool="refused", reason="forbidden", detail="not yours"),
    OperationRejected(tool="", reason="confirmation_declined", detail="said no"),
    OperationStarted(worker_id="w1", attempt=1),
    OperationAttempted(attempt=1, outcome="server_error", provider_ref="p1"),
    OperationProgress(message="halfway"),
    OperationRetryScheduled(attempt=1, reason="server_error: 503", retry_at=AT),
    OperationUnknown(reason="no answer after sending"),
    OperationReconciled(detail="nothing there"),
    OperationCommitted(result={"id": "R7"}),
    OperationCommitted(result={}),
    OperationFailedFinal(reason="server_error", detail="kept failing"),
    OperationFailedFinal(reason="deadline"),
    OperationCancelRequested(requested_by="user", reason="changed my mind"),
    OperationCancelled(),
    OperationCancelRefused(reason="already committed"),
    OperationCompensated(compensation_operation_id="op2"),
    OperationDeadLettered(reason="poison"),
)

_DEPTH = 7
# Events after the terminal one (a refusal, a compensation, a dead letter) still change no
# word; a few are enough.
_AFTER = 2


def _env(event: OperationEvent) -> Envelope[OperationEvent]:
    return envelope(event, session_id="s1", operation_id="op1", batch_id="b1")


def _histories() -> Iterator[tuple[list[Envelope[OperationEvent]], OperationState]]:
    """Every legal history up to `_DEPTH` events that reached a terminal state."""

    def walk(
        state: OperationState | None, events: list[Envelope[OperationEvent]], after: int
    ) -> Iterator[tuple[list[Envelope[OperationEvent]], OperationState]]:
        if state is not None and state.terminal:
            yield events, state
            if after == _AFTER:
                return
        if len(events) == _DEPTH:
            return
        for event in SAMPLES:
            env = _env(event)
            try:
                nxt = operation_domain.evolve(state, env)
            except operation_domain.IllegalTransition:
                continue
            yield from walk(nxt, [*events, env], after + (state is not None and state.terminal))

    yield from walk(None, [], 0)


def _fold(events: list[Envelope[OperationEvent]], *, kinds: tuple[type[Any], ...] = ALL) -> Any:
    view: MemberView | None = None
    for env in events:
        if type(env.event) in kinds:
            view = evolve_member(view, env)
    return view


def _opening(events: list[Envelope[OperationEvent]]) -> BatchState:
    """The batch a real admission opened for this history: its first opening's words (an
    admission, a request waiting for confirmation, or a rejection), as `batch_opened` names
    them from the plan, the declaration's priority for a request or a rejection."""
    first = next(
        e.event for e in events
        if isinstance(e.event, OperationAdmitted | OperationRequested | OperationRejected)
    )
    admissions = [e.event for e in events if isinstance(e.event, OperationAdmitted)]
    arguments: dict[str, Any] = {}
    # The declaration's priority; urgent where nothing admitted it, so a request declined
    # or a rejection shows that only an admission takes it.
    priority = admissions[0].priority if admissions else "urgent"
    if isinstance(first, OperationAdmitted | OperationRequested):
        arguments = first.arguments
    return BatchState(
        batch_id="b1", session_id="s1", members=("op1",), tools=(first.tool,),
        arguments=(arguments,), priorities=(priority,),
    )


def _closing_view(events: list[Envelope[OperationEvent]]) -> Any:
    """What the coordinator words a member with: its fold of `COORDINATED`, opened from the
    batch when no opening kind of its own was delivered."""
    return opened_from_batch(_fold(events, kinds=COORDINATED), _opening(events), "op1")


def _realistic(events: list[Envelope[OperationEvent]]) -> bool:
    # A confirmation is appended with its admission, which repeats the request's tool and
    # arguments (`followups.decide_confirm`); the samples pair any request with anything.
    kinds = [type(e.event) for e in events]
    if any(
        k is OperationConfirmed and (i + 1 == len(kinds) or kinds[i + 1] is not OperationAdmitted)
        for i, k in enumerate(kinds)
    ):
        return False
    asked = [e.event for e in events if isinstance(e.event, OperationRequested)]
    admitted = [e.event for e in events if isinstance(e.event, OperationAdmitted)]
    return not (asked and admitted) or all(
        (a.tool, a.arguments) == (r.tool, r.arguments) for a in admitted for r in asked
    )


def _outcome(status: str, state: Any) -> OperationOutcome:
    return outcome_of("op1", status, state, DECLARATIONS.get(state.tool))  # type: ignore[arg-type]


def test_every_terminal_history_words_the_same_closing_from_the_view() -> None:
    histories = 0
    statuses: set[str] = set()
    for events, full in _histories():
        if not _realistic(events):
            continue
        histories += 1
        status = full.status.value
        statuses.add(status)
        view = _closing_view(events)
        assert view is not None, events
        assert view.opened, events
        assert view.status == status, events
        assert _outcome(status, view) == _outcome(status, full), events
        assert priority_of([view]) == priority_of([full]), events
        # The start-up replay feeds every kind, admissions included: the words are the same.
        replayed = opened_from_batch(_fold(events), _opening(events), "op1")
        assert _outcome(status, replayed) == _outcome(status, view), events
        assert priority_of([replayed]) == priority_of([view]), events
    # The walk reached every way an operation ends, through many histories.
    assert statuses == {"committed", "failed_final", "cancelled", "rejected"}
    assert histories > 1000


def test_the_words_differ_where_the_histories_do() -> None:
    # The comparison above can fail: the view's words carry each history's own values.
    def closing(*events: OperationEvent) -> OperationOutcome:
        view = _closing_view([_env(e) for e in events])
        assert view is not None
        assert view.status is not None
        return _outcome(view.status, view)

    admitted = SAMPLES[3]
    started = OperationStarted(worker_id="w1", attempt=1)
    assert closing(admitted, started, OperationCommitted(result={"id": "R7"})).line == (
        "booked R7 for bo is done."
    )
    retried = closing(
        admitted, started, OperationRetryScheduled(attempt=1, reason="busy", retry_at=AT),
        OperationCancelRequested(requested_by="user", reason="no"), OperationCancelled(),
    )
    assert (retried.status, retried.detail, retried.label) == ("cancelled", "busy", "booked for bo")
    asked = closing(
        SAMPLES[0], OperationRejected(tool="", reason="confirmation_declined", detail="said no")
    )
    assert (asked.tool, asked.label, asked.detail) == (
        "asked", "asked for ana", "confirmation_declined: said no"
    )


def test_a_callback_twice_or_a_late_kind_changes_no_word() -> None:
    # Every kind but an opening one (an admission is written first, on an empty subject:
    # one seen late was only delivered late, and its words are the operation's).
    late_kinds = [e for e in SAMPLES if not isinstance(e, OperationAdmitted | OperationRequested)]
    for events, full in itertools.islice(filter(lambda h: _realistic(h[0]), _histories()),
                                         0, None, 7):
        view = _closing_view(events)
        status = full.status.value
        for late in late_kinds:
            again = evolve_member(view, _env(late))
            assert again.status == status
            assert _outcome(status, again) == _outcome(status, full), (events, late)


def test_any_order_folds_without_refusal_and_the_first_terminal_settles() -> None:
    events = [
        _env(e) for e in (
            SAMPLES[3], OperationStarted(worker_id="w1", attempt=1),
            OperationRetryScheduled(attempt=1, reason="busy", retry_at=AT),
            OperationCommitted(result={"id": "R7"}), OperationFailedFinal(reason="late"),
        )
    ]
    for order in itertools.permutations(events):
        view = _fold(list(order))
        first = next(member_status(e.event) for e in order if member_status(e.event))
        assert view.status == first
        # The admission's words hold wherever it came.
        assert (view.tool, view.arguments, view.priority) == ("booked", {"who": "bo"}, "urgent")
    # A rejection's tool name outranks its request's, whichever is folded first.
    rejected, asked = _env(SAMPLES[5]), _env(SAMPLES[0])
    for pair in ([asked, rejected], [rejected, asked]):
        view = _fold(pair)
        assert (view.tool, view.arguments, view.status) == ("refused", {"who": "ana"}, "rejected")


def test_a_view_without_its_opening_says_so() -> None:
    # Only a terminal event seen: the coordinator must load the operation, not guess.
    view = evolve_member(None, _env(OperationCommitted(result={"id": "R7"})))
    assert view.status == "committed"
    assert not view.opened


def test_a_kind_the_view_reads_is_asked_for_and_the_others_change_nothing() -> None:
    base = MemberView(operation_id="op1", session_id="s1", batch_id="b1", tool="t",
                      arguments={"a": 1}, opened=True, admitted=True)
    views = [
        base,
        msgspec.structs.replace(base, status="committed", result={"id": 1}),
        msgspec.structs.replace(base, failure="busy"),
    ]
    for event in SAMPLES:
        changed = any(evolve_member(v, _env(event)) != v for v in views)
        if isinstance(event, OperationAdmitted):
            # Its words come with the batch (`batch.opened`); replays still fold it.
            assert changed
            continue
        if changed:
            assert type(event) in COORDINATED, event
        elif type(event) not in (OperationProgress, OperationRejected, OperationRequested):
            # Nothing else may be asked for only to be dropped.
            assert type(event) not in COORDINATED, event
    assert OperationStarted not in COORDINATED
    assert OperationAttempted not in COORDINATED
    assert OperationAdmitted not in COORDINATED


def test_a_batch_opening_gives_the_words_and_keeps_what_the_member_said() -> None:
    committed = evolve_member(None, _env(OperationCommitted(result={"id": "R7"})))
    opening = BatchState(
        batch_id="b1", session_id="s1", members=("op0", "op1"), tools=("other", "booked"),
        arguments=({}, {"who": "bo"}), priorities=("normal", "urgent"),
    )
    view = opened_from_batch(committed, opening, "op1")
    assert view is not None
    assert (view.tool, view.arguments, view.priority, view.opened) == (
        "booked", {"who": "bo"}, "urgent", True
    )
    assert (view.status, view.result) == ("committed", {"id": "R7"})
    assert _outcome("committed", view).line == "booked R7 for bo is done."
    # A member whose own opening was delivered (a rejection) keeps its own words.
    refused = evolve_member(None, _env(SAMPLES[5]))
    assert opened_from_batch(refused, opening, "op1") is refused
    # A confirmed request keeps its words and takes the admission's priority.
    asked = evolve_member(None, _env(SAMPLES[0]))
    confirmed = evolve_member(asked, _env(OperationConfirmed()))
    worded = opened_from_batch(confirmed, opening, "op1")
    assert worded is not None
    assert (worded.tool, worded.arguments, worded.priority) == ("asked", {"who": "ana"}, "urgent")
    assert opened_from_batch(asked, opening, "op1") is asked
    # A batch opened by an earlier version names tools only: the closing must load.
    older = BatchState(batch_id="b1", session_id="s1", members=("op1",), tools=("booked",))
    unopened = opened_from_batch(committed, older, "op1")
    assert unopened is not None
    assert not unopened.opened
    assert opened_from_batch(None, older, "op1") is None
    again = opened_from_batch(confirmed, older, "op1")
    assert again is not None
    assert not again.opened
