"""The ActivityGate's decision (pure): `decide_delivery` for one delivery, relevance first, then
the timing `choose_delivery` picks from the channel's state.

The delivery-policy service folds events into `ChannelState` and `OperationFacts`
(`channel.py`), then asks `decide_delivery` what to append; the answer depends only on those
projections, the policy's timings (`gate_policy.py`) and the `now` it is given. Reasons are
stable codes (`user_speaking`, `quiet_window`, ...) followed by detail after a colon.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from libs.events import (
    DeliveryDecided,
    DeliveryEvent,
    DeliveryRequeued,
    DeliverySuppressed,
)
from libs.events.deliveries import Decision, DeliveryMode

from .channel import ChannelState, OperationFacts
from .delivery import DeliveryState, DeliveryStatus
from .gate_policy import GatePolicy
from .relevance import check_relevance, refusal_events

# Unheard before any of it played: said again whole, not in its short form.
NOT_STARTED_REASONS = frozenset({"user_speaking", "not_started"})


@dataclass(frozen=True, slots=True)
class GateDecision:
    """The ActivityGate's choice for a relevant delivery."""

    decision: Decision
    reason: str
    mode: DeliveryMode | None = None
    recheck_at: datetime | None = None
    resync: bool = False


def choose_delivery(
    delivery: DeliveryState,
    channel: ChannelState,
    now: datetime,
    *,
    min_quiet_ms: int,
    window_ms: int,
    max_unheard: int = 3,
) -> GateDecision:
    """Seed 002's `choose_delivery`, extended with quiet windows, disconnects and a wait limit."""
    ready_at = delivery.ready_at or now
    window_end = ready_at + timedelta(milliseconds=window_ms)
    if delivery.unheard >= max_unheard:
        return GateDecision(
            "attach_next_turn",
            f"unheard_retries_exhausted: unheard {delivery.unheard} times",
            "next_turn",
            resync=True,
        )
    if delivery.priority == "urgent" and delivery.kind == "final" and channel.can_interrupt:
        return GateDecision("interrupt", "urgent: priority allows cutting in", "interrupt")
    quiet_end = (
        channel.user_stopped_at + timedelta(milliseconds=min_quiet_ms)
        if channel.user_stopped_at is not None
        else None
    )
    choice: GateDecision
    if not channel.available:
        choice = GateDecision(
            "attach_next_turn", "channel_disconnected: no call attached", "next_turn", window_end
        )
    elif channel.user_speaking:
        choice = GateDecision("wait_for_quiet", "user_speaking", None, window_end)
    elif quiet_end is not None and now < quiet_end:
        choice = GateDecision(
            "wait_for_quiet",
            f"quiet_window: {min_quiet_ms} ms of silence first",
            None,
            min(quiet_end, window_end),
        )
    elif channel.playback_active:
        choice = GateDecision("after_playback", "playback_active", None, window_end)
    elif channel.turn_open:
        choice = GateDecision("attach_next_turn", "turn_open", "next_turn", window_end)
    elif channel.response_active:
        choice = GateDecision("attach_next_turn", "response_active", "next_turn", window_end)
    else:
        return GateDecision("deliver_now", "channel_idle", "proactive")
    if now >= window_end:
        if delivery.kind == "progress":
            return GateDecision("suppress", "progress_outdated: no window before the limit")
        return GateDecision(
            "attach_next_turn",
            f"window_expired: no proactive window in {window_ms} ms ({choice.reason})",
            "next_turn",
            resync=True,
        )
    return choice


# --------------------------------------------------------------------------- decider


@dataclass(frozen=True, slots=True)
class GateOutcome:
    """Events to append for one delivery, and facts the shell reports as metrics."""

    events: list[DeliveryEvent]
    recheck_at: datetime | None = None
    first_decision: str | None = None
    stale: bool = False
    resync: bool = False


@dataclass(frozen=True, slots=True)
class GateView:
    """The projections of one session the gate decides from."""

    channel: ChannelState | None
    ops: Mapping[str, OperationFacts]
    session_ops: tuple[OperationFacts, ...] = ()
    # batch id -> final delivery id, for the finals that exist.
    finals: Mapping[str, str] = field(default_factory=dict)


def decide_delivery(
    delivery: DeliveryState, view: GateView, now: datetime, policy: GatePolicy
) -> GateOutcome:
    """Relevance first, then timing. Appends nothing when the decision did not change."""
    channel, ops = view.channel, view.ops
    if not delivery.open:
        return GateOutcome(events=[])
    events: list[DeliveryEvent] = []
    if delivery.status is DeliveryStatus.UNHEARD:
        # Cut while playing: said again shorter. Held back before any audio (the caller was
        # talking): nothing was heard, so it is said whole.
        held = (delivery.reason or "").partition(":")[0] in NOT_STARTED_REASONS
        text = delivery.text if held else delivery.short_text
        reason = (
            f"unheard: not started ({delivery.reason})" if held
            else f"unheard: retry shorter ({delivery.reason or 'cut'})"
        )
        events.append(DeliveryRequeued(text=text, reason=reason))
        delivery = replace(
            delivery, status=DeliveryStatus.PENDING, text=text, decision=None,
            reason=reason, recheck_at=None, resync=False,
        )
    first = delivery.decision is None
    verdict = check_relevance(delivery, channel, ops, view.session_ops, view.finals)
    if verdict is not None:
        events.extend(refusal_events(delivery, verdict))
        return GateOutcome(
            events=events, first_decision=verdict.action if first else None, stale=verdict.stale
        )
    if channel is None:
        channel = ChannelState(session_id=delivery.session_id)
    # Said now, or pinned to the next reply: only relevance can still change its course.
    if delivery.handed_off or delivery.resync:
        return GateOutcome(events=events, recheck_at=None)
    domain = _domain(delivery, ops)
    choice = choose_delivery(
        delivery,
        channel,
        now,
        min_quiet_ms=policy.quiet_ms(channel.kind, policy.language, domain),
        window_ms=policy.window_ms,
        max_unheard=policy.max_unheard,
    )
    if choice.decision == "suppress":
        events.append(DeliveryDecided(decision="suppress", reason=choice.reason))
        events.append(DeliverySuppressed(reason=choice.reason))
        return GateOutcome(events=events, first_decision="suppress" if first else None)
    unchanged = (
        delivery.decision == choice.decision
        and delivery.reason == choice.reason
        and delivery.recheck_at == choice.recheck_at
    )
    if not unchanged:
        events.append(
            DeliveryDecided(
                decision=choice.decision,
                reason=choice.reason,
                mode=choice.mode,
                recheck_at=choice.recheck_at,
                resync=choice.resync,
            )
        )
    return GateOutcome(
        events=events,
        recheck_at=choice.recheck_at,
        first_decision=choice.decision if first and not unchanged else None,
        resync=choice.resync and not delivery.resync,
    )


def _domain(delivery: DeliveryState, ops: Mapping[str, OperationFacts]) -> str:
    tools = sorted({ops[o].tool for o in delivery.source_operation_ids if o in ops and ops[o].tool})
    return tools[0] if tools else "*"
