"""Every measure of docs/contract.md §9, declared once per process so each family
exists from start-up.

Labels are bounded (tool, channel, decision, outcome, stream); never session or user ids.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import get_args

from prometheus_client import Counter, Gauge, Histogram

from libs.events.deliveries import Decision, DeliveryMode
from libs.events.interaction import Channel

# Buckets from 1 ms to 60 s: conversational latencies and slow providers on one scale.
_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.015,
    0.02,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

ACCEPTANCE = Histogram(
    "holdline_acceptance_seconds", "Request to acceptance of a turn.", buckets=_BUCKETS
)
BARGE_IN = Histogram(
    "holdline_barge_in_seconds", "First voiced frame of a barge-in to clear sent.", buckets=_BUCKETS
)
DELIVERY_READY_TO_SENT = Histogram(
    "holdline_delivery_ready_to_sent_seconds", "delivery.ready to delivery.sent.", buckets=_BUCKETS
)
SPEECH_STOP_TO_ACCEPTANCE_AUDIO = Histogram(
    "holdline_speech_stop_to_acceptance_audio_seconds",
    "End of user speech to the first byte of acceptance audio.",
    buckets=_BUCKETS,
)
OPERATION_ACCEPT_TO_START = Histogram(
    "holdline_operation_accept_to_start_seconds",
    "operation.admitted to operation.started.",
    ["tool"],
    buckets=_BUCKETS,
)
OPERATION_DURATION = Histogram(
    "holdline_operation_duration_seconds",
    "operation.started to a terminal state.",
    ["tool", "status"],
    buckets=_BUCKETS,
)
COMPLETE_TO_DELIVERY_READY = Histogram(
    "holdline_operation_complete_to_delivery_ready_seconds",
    "Last member of a batch terminal to delivery.ready.",
    buckets=_BUCKETS,
)
DELIVERY_READY_TO_FIRST_AUDIO = Histogram(
    "holdline_delivery_ready_to_first_audio_seconds",
    "delivery.ready to the first audio byte of the delivery.",
    buckets=_BUCKETS,
)
DELIVERY_READY_TO_DECISION = Histogram(
    "holdline_delivery_ready_to_decision_seconds",
    "delivery.ready to the policy's decision.",
    ["decision"],
    buckets=_BUCKETS,
)
GENERATED_TO_PLAYED_GAP = Histogram(
    "holdline_generated_to_played_gap_seconds",
    "Audio generated to audio confirmed played.",
    buckets=_BUCKETS,
)
CANCELLED_UNHEARD_AUDIO = Histogram(
    "holdline_cancelled_unheard_audio_seconds",
    "Generated audio excluded from history because it was never heard.",
    buckets=_BUCKETS,
)
# The system of record counts these (its effect ledger knows every effect's key); the sandbox
# provider exports the same family by kind. Runtime services expose it so the name exists
# everywhere, and never add to it: the dashboard sums over every target.
DUPLICATE_SIDE_EFFECTS = Counter(
    "holdline_duplicate_side_effects", "Side effects beyond the first for one intent."
)
DUPLICATE_DELIVERIES = Counter(
    "holdline_duplicate_deliveries", "Final deliveries beyond the first for one batch (refused)."
)
STALE_DELIVERIES = Counter("holdline_stale_deliveries", "Deliveries found stale by the gate.")
DELIVERIES = Counter("holdline_deliveries", "Deliveries sent, by mode.", ["mode", "channel"])
NEXT_TURN_RESYNCS = Counter(
    "holdline_next_turn_resyncs", "Deliveries that found no proactive window."
)
RETRIES = Counter("holdline_operation_retries", "Retries scheduled.", ["tool"])
TIMEOUTS = Counter("holdline_operation_timeouts", "Attempts that timed out.", ["tool", "phase"])
UNKNOWNS = Counter("holdline_operation_unknown", "Operations that entered UNKNOWN.", ["tool"])
CANCELLATIONS_REQUESTED = Counter(
    "holdline_cancellations_requested", "Explicit cancellations requested.", ["tool"]
)
CANCELLATIONS_CONFIRMED = Counter(
    "holdline_cancellations_confirmed", "Cancellations confirmed by a terminal state.", ["tool"]
)
COMPENSATIONS = Counter("holdline_compensations", "Compensation operations admitted.", ["tool"])
HANDOFFS_WITH_PENDING = Counter(
    "holdline_handoffs_with_pending_operations", "Handoffs while operations were still open."
)
OPERATIONS_ADMITTED = Counter("holdline_operations_admitted", "Operations admitted.", ["tool"])
OPERATIONS_REJECTED = Counter(
    "holdline_operations_rejected", "Operations rejected at admission.", ["tool", "reason"]
)
OPERATIONS_TERMINAL = Counter(
    "holdline_operations_terminal", "Operations that reached a terminal state.", ["tool", "status"]
)
EVENTS_PUBLISHED = Counter("holdline_events_published", "Events appended.", ["stream"])
DEAD_LETTERS = Counter("holdline_dead_letters", "Messages moved to the DLQ.", ["stream", "reason"])
CONSUMER_LAG = Gauge("holdline_consumer_pending", "Messages not yet handled.", ["consumer"])
TELEPHONY_FRAMES_REJECTED = Counter(
    "holdline_telephony_frames_rejected",
    "Twilio frames dropped at the edge, by reason.",
    ["reason"],
)
TELEPHONY_CALLS = Counter(
    "holdline_telephony_calls", "Calls attached, by how they ended.", ["outcome"]
)

# Not in §9: where a turn's acceptance time goes, phase by phase (request checks, the turn
# claim, each append and its wait, the model, admission's claims and appends). Off unless
# the surface's settings turn it on (HOLDLINE_TURN_PHASES, through `time_turn_phases`): the
# acceptance benchmark and a dashboard under study do. A process-wide switch, like the
# registry it records into.
TURN_PHASE = Histogram(
    "holdline_turn_phase_seconds",
    "Time one turn spends in each phase of its critical path.",
    ["phase"],
    buckets=_BUCKETS,
)
_turn_phases_on = False


def time_turn_phases(on: bool) -> None:
    """Record `turn_phase` blocks from now on (or stop): called once by the composition root."""
    global _turn_phases_on  # noqa: PLW0603 - one switch per process, like the registry
    _turn_phases_on = on


@contextmanager
def turn_phase(phase: str) -> Iterator[None]:
    """Time the block as one phase of a turn (when `time_turn_phases(True)` was called)."""
    if not _turn_phases_on:
        yield
        return
    started = time.perf_counter()
    try:
        yield
    finally:
        TURN_PHASE.labels(phase).observe(time.perf_counter() - started)


def initialise_tools(tools: Iterable[str], terminal_statuses: Iterable[str] = ()) -> None:
    """Create every per-tool (and per tool and terminal status) series at zero before use.

    A labelled series otherwise appears with its first increment, and Prometheus reads that
    first sample as the start: `rate()` and `increase()` miss the first event of each tool
    (a panel stays empty until the second). The real Prometheus test showed it.
    """
    statuses = list(terminal_statuses)
    for tool in tools:
        for family in (
            OPERATION_ACCEPT_TO_START,
            OPERATIONS_ADMITTED,
            RETRIES,
            UNKNOWNS,
            CANCELLATIONS_REQUESTED,
            CANCELLATIONS_CONFIRMED,
            COMPENSATIONS,
        ):
            family.labels(tool=tool)
        for status in statuses:
            OPERATIONS_TERMINAL.labels(tool, status)
            OPERATION_DURATION.labels(tool, status)


def initialise_deliveries() -> None:
    """Every delivery mode and channel pair, and every policy decision, at zero."""
    for mode in get_args(DeliveryMode):
        for channel in get_args(Channel):
            DELIVERIES.labels(mode=mode, channel=channel)
    for decision in get_args(Decision):
        DELIVERY_READY_TO_DECISION.labels(decision=decision)
