"""The ActivityGate: a per-session channel projection, the relevance gate and `choose_delivery`.

Everything here is pure. The delivery-policy service folds events into `ChannelState` and
`OperationFacts`, then asks `decide_delivery` what to append for one delivery; the answer
depends only on those projections, the policy's timings and the `now` it is given.

Reasons are stable codes (`user_speaking`, `stale_superseded`, ...) followed by detail
after a colon, so dashboards can group on the code and people can read the rest.

Over 400 lines on purpose: the channel fold, the relevance checks and the timing choice are
one decision (`decide_delivery`) and its inputs, kept together so the rule reads in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Literal, Protocol

from libs.events import (
    AgentHandedOff,
    ChannelConnected,
    ChannelDisconnected,
    DeliveryDecided,
    DeliveryEvent,
    DeliveryReconciliationRequested,
    DeliveryRequeued,
    DeliverySuperseded,
    DeliverySuppressed,
    Envelope,
    InteractionEvent,
    OperationAdmitted,
    OperationCompensated,
    OperationEvent,
    OperationRejected,
    PlaybackFinished,
    PlaybackStarted,
    ResponseFinished,
    ResponseStarted,
    SessionClosed,
    SessionOpened,
    SpeechStarted,
    SpeechStopped,
    ToolCallsReceived,
    TurnReceived,
    TurnReplied,
    UserActivity,
)
from libs.events.deliveries import Decision, DeliveryMode

from .batch import final_delivery_id
from .delivery import DeliveryState, DeliveryStatus

ChannelKind = Literal["chat", "voice", "agent"]
# Unheard before any of it played: said again whole, not in its short form.
NOT_STARTED_REASONS = frozenset({"user_speaking", "not_started"})

# --------------------------------------------------------------------------- channel


@dataclass(frozen=True, slots=True)
class ChannelState:
    """What the conversation is doing right now, as the interaction events tell it."""

    session_id: str
    user_id: str | None = None
    tenant_id: str | None = None
    agent: str | None = None
    user_speaking: bool = False
    user_stopped_at: datetime | None = None
    response_active: bool = False
    playback_active: bool = False
    open_turn_id: str | None = None
    connections: MappingProxyType[str, ChannelKind] = field(
        default_factory=lambda: MappingProxyType({})
    )
    last_kind: ChannelKind = "chat"
    closed: bool = False
    version: int = 0

    @property
    def kind(self) -> ChannelKind:
        """Voice while a call is attached, an agent's while its channel is, else the last seen."""
        kinds = set(self.connections.values())
        if "voice" in kinds:
            return "voice"
        if "agent" in kinds:
            return "agent"
        return "chat" if self.connections else self.last_kind

    @property
    def available(self) -> bool:
        """Something can be said now: a connection is attached, or it is chat.

        Chat history is durable, so a chat message written while no stream is attached
        still reaches the user; a voice session without a call, or an external agent
        without its channel, has nobody to speak to (the agent reads `/pending` instead).
        """
        return not self.closed and (bool(self.connections) or self.last_kind == "chat")

    @property
    def turn_open(self) -> bool:
        """A user turn was received and its reply is not written yet."""
        return self.open_turn_id is not None

    @property
    def can_interrupt(self) -> bool:
        """An urgent result may cut in."""
        return self.available


def evolve_channel(state: ChannelState | None, env: Envelope[InteractionEvent]) -> ChannelState:
    """Apply one interaction event. Never refuses: the gate must keep a usable view."""
    event = env.event
    if state is None:
        state = ChannelState(session_id=env.session_id)
    state = replace(state, version=state.version + 1)
    at = env.occurred_at
    match event:
        case SessionOpened(user_id=user, tenant_id=tenant, agent=agent):
            return replace(state, user_id=user, tenant_id=tenant, agent=agent)
        case SessionClosed():
            return replace(state, closed=True)
        case TurnReceived(channel=kind):
            # The turn's text is in: the user finished this utterance.
            stopped = at if state.user_speaking else state.user_stopped_at
            return replace(
                state,
                open_turn_id=env.turn_id or "turn",
                user_speaking=False,
                user_stopped_at=stopped,
                last_kind=kind,
            )
        case TurnReplied() if env.turn_id is None or env.turn_id == state.open_turn_id:
            # A proactive closing also arrives as turn.replied (with its batch's old turn
            # id): only the reply to the open turn closes it.
            return replace(state, open_turn_id=None)
        case TurnReplied():
            return state
        case AgentHandedOff(to_agent=agent):
            return replace(state, agent=agent)
        case ToolCallsReceived():
            return replace(state, last_kind="agent")
        case UserActivity(typing=True) | SpeechStarted():
            return replace(state, user_speaking=True)
        case UserActivity(typing=False) | SpeechStopped():
            return replace(state, user_speaking=False, user_stopped_at=at)
        case ResponseStarted():
            return replace(state, response_active=True)
        case ResponseFinished():
            return replace(state, response_active=False)
        case PlaybackStarted():
            return replace(state, playback_active=True)
        case PlaybackFinished():
            return replace(state, playback_active=False)
        case ChannelConnected(channel=kind, connection_id=conn):
            connections = {**state.connections, conn: kind}
            # A caller who just dialled is not speaking yet, whatever an older call left.
            speaking = state.user_speaking and kind != "voice"
            return replace(
                state,
                connections=MappingProxyType(connections),
                last_kind=kind,
                user_speaking=speaking,
            )
        case ChannelDisconnected(channel=kind, connection_id=conn):
            connections = {k: v for k, v in state.connections.items() if k != conn}
            # A call that hangs up leaves nobody to speak to, and no playback either; nor a
            # caller still speaking (a call that died mid-sentence never recorded the stop).
            playback = state.playback_active and bool(connections)
            speaking = state.user_speaking and (
                kind != "voice" or "voice" in connections.values()
            )
            return replace(
                state,
                connections=MappingProxyType(connections),
                last_kind=kind,
                playback_active=playback,
                user_speaking=speaking,
            )
    return state


# --------------------------------------------------------------------------- operations


@dataclass(frozen=True, slots=True)
class OperationFacts:
    """What the relevance gate needs to know about one operation."""

    operation_id: str
    session_id: str
    batch_id: str | None = None
    subject_key: str | None = None
    user_id: str | None = None
    agent: str | None = None
    owner: str = "session"
    tool: str = ""
    # Stream sequence of the admission: "newer" means admitted later in the stream.
    admitted_seq: int = 0
    compensated_by: str | None = None


# The operation events `evolve_facts` reads (every other kind leaves the facts as they are):
# the delivery policy's consumer asks the broker for these kinds only. How an operation
# ended is not among them: the gate judges a closing by who asked, on which subject, and
# whether it was undone, and the closing itself (from the coordinator) carries the outcome.
FACT_EVENTS: tuple[type[OperationEvent], ...] = (
    OperationAdmitted,
    OperationRejected,
    OperationCompensated,
)


def evolve_facts(
    state: OperationFacts | None, env: Envelope[OperationEvent], stream_seq: int
) -> OperationFacts:
    """Fold the few operation events the gate reads; the rest leave the facts as they are."""
    event = env.event
    if state is None:
        state = OperationFacts(
            operation_id=env.operation_id or "",
            session_id=env.session_id,
            batch_id=env.batch_id,
            subject_key=env.subject_key,
            agent=env.agent,
        )
    match event:
        case OperationAdmitted():
            return replace(
                state,
                batch_id=env.batch_id or state.batch_id,
                subject_key=env.subject_key or state.subject_key,
                agent=env.agent or state.agent,
                user_id=event.user_id,
                owner=event.owner,
                tool=event.tool,
                admitted_seq=stream_seq,
            )
        case OperationRejected(tool=tool):
            return replace(state, tool=tool)
        case OperationCompensated(compensation_operation_id=comp):
            return replace(state, compensated_by=comp)
    return state


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True, slots=True)
class QuietRule:
    """A minimum quiet time for deliveries matching channel, language and domain ("*": any)."""

    channel: str
    language: str
    domain: str
    min_quiet_ms: int

    def matches(self, channel: str, language: str, domain: str) -> bool:
        """Whether every non-wildcard field equals the given value."""
        return all(
            want in ("*", have)
            for want, have in ((self.channel, channel), (self.language, language),
                               (self.domain, domain))
        )

    @property
    def specificity(self) -> int:
        """How many fields are not wildcards; the most specific rule wins."""
        return sum(1 for v in (self.channel, self.language, self.domain) if v != "*")


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """Timings of the ActivityGate."""

    min_quiet_ms: int = 650
    rules: tuple[QuietRule, ...] = ()
    # How long a delivery may wait for a proactive window before next-turn resync.
    window_ms: int = 30_000
    # Unheard attempts before the delivery stops trying proactively.
    max_unheard: int = 3
    language: str = "en"

    def quiet_ms(self, channel: str, language: str, domain: str) -> int:
        """The quiet time for a delivery on this channel, in this language and domain."""
        matching = [r for r in self.rules if r.matches(channel, language, domain)]
        if not matching:
            return self.min_quiet_ms
        return max(matching, key=lambda r: r.specificity).min_quiet_ms


def parse_quiet_rules(text: str) -> tuple[QuietRule, ...]:
    """Parse `channel:language:domain=ms` entries separated by commas ("*" = any)."""
    rules: list[QuietRule] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        parts = key.strip().split(":")
        if not sep or len(parts) != 3:
            raise ValueError(f"quiet rule {item!r} is not channel:language:domain=ms")
        try:
            ms = int(value)
        except ValueError as exc:
            raise ValueError(f"quiet rule {item!r}: {value!r} is not milliseconds") from exc
        if ms < 0:
            raise ValueError(f"quiet rule {item!r}: milliseconds must be >= 0")
        channel, language, domain = (p.strip() or "*" for p in parts)
        rules.append(QuietRule(channel, language, domain, ms))
    return tuple(rules)


# --------------------------------------------------------------------------- relevance


@dataclass(frozen=True, slots=True)
class Verdict:
    """The relevance gate's refusal: what to append instead of a timing decision."""

    action: Literal["suppress", "supersede"]
    reason: str
    by_delivery_id: str | None = None
    reconcile: DeliveryReconciliationRequested | None = None
    stale: bool = False


def check_relevance(
    delivery: DeliveryState,
    channel: ChannelState | None,
    ops: Mapping[str, OperationFacts],
    session_ops: Iterable[OperationFacts],
    finals: Mapping[str, str],
) -> Verdict | None:
    """None when the delivery may still be said; otherwise why not.

    `session_ops` are the session's operations; `finals` maps batch id to its final
    delivery id for the finals that exist.
    """
    sources = [ops[o] for o in delivery.source_operation_ids if o in ops]
    if channel is not None and channel.closed:
        return Verdict("suppress", "session_closed: no turn can carry it any more")
    for op in sources:
        if op.session_id != delivery.session_id:
            return Verdict("suppress", f"wrong_session: {op.operation_id} belongs elsewhere")
        if channel is not None and channel.user_id and op.user_id and op.user_id != channel.user_id:
            return Verdict("suppress", f"wrong_user: {op.operation_id} was asked by another user")
    # Not already communicated: a progress note is moot once the batch's closing exists.
    final = finals.get(delivery.batch_id or "")
    if delivery.kind == "progress" and final is not None:
        return Verdict(
            "supersede",
            "final_ready: the batch's closing replaces its progress notes",
            by_delivery_id=final,
        )
    stale = _newer_intent(delivery, sources, session_ops)
    if stale is not None:
        old, newer = stale
        return _superseded(
            old.operation_id,
            newer,
            tuple(o.operation_id for o in sources if o.subject_key == newer.subject_key),
        )
    refused = not_allowed(sources, channel.agent if channel is not None else None)
    if refused is not None:
        return Verdict("suppress", refused)
    for op in sources:
        if op.compensated_by is not None:
            return _undone(op.operation_id, op.compensated_by)
    return None


class Owned(Protocol):
    """An operation as far as the owner rule reads it (the gate's facts, a view's state)."""

    @property
    def operation_id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def agent(self) -> str | None: ...


def not_allowed(sources: Iterable[Owned], active: str | None) -> str | None:
    """Why a closing may not be said to the active agent: a source operation is owned by
    another agent (the one that asked, before a handoff); None when every source allows it."""
    for op in sources:
        if op.owner == "agent" and op.agent and active and op.agent != active:
            return (
                f"agent_not_allowed: {op.operation_id} belongs to agent {op.agent}, "
                f"active agent is {active}"
            )
    return None


def _superseded(old: str, newer: OperationFacts, replaced: tuple[str, ...]) -> Verdict:
    reason = (
        f"stale_superseded: {newer.operation_id} is a newer intent on "
        f"{newer.subject_key} than {old}"
    )
    return Verdict(
        "supersede",
        reason,
        by_delivery_id=final_delivery_id(newer.batch_id or newer.operation_id),
        reconcile=DeliveryReconciliationRequested(
            operation_ids=replaced,
            reason=reason,
            newer_operation_id=newer.operation_id,
            subject_key=newer.subject_key,
        ),
        stale=True,
    )


def _undone(operation_id: str, compensation_id: str) -> Verdict:
    reason = f"needs_reconciliation: {operation_id} is being undone by {compensation_id}"
    return Verdict(
        "suppress",
        reason,
        reconcile=DeliveryReconciliationRequested(operation_ids=(operation_id,), reason=reason),
    )


def stale_after_turn(
    delivery: DeliveryState,
    superseded_by: Mapping[str, OperationFacts],
    undone_by: Mapping[str, str],
) -> Verdict | None:
    """The gate's answer for an update a turn's own requests have just made stale.

    A turn decides what rides on its reply only after admitting its calls, before the gate
    has seen them: `superseded_by` maps an older operation to the newer intent that replaces
    it, `undone_by` an operation to the compensation the user asked for. Same reasons as
    `check_relevance`, so the record reads the same whoever decided.
    """
    sources = delivery.source_operation_ids
    for op in sources:
        newer = superseded_by.get(op)
        if newer is not None:
            replaced = tuple(
                o for o in sources
                if o in superseded_by and superseded_by[o].operation_id == newer.operation_id
            )
            return _superseded(op, newer, replaced)
    for op in sources:
        if op in undone_by:
            return _undone(op, undone_by[op])
    return None


def refusal_events(delivery: DeliveryState, verdict: Verdict) -> list[DeliveryEvent]:
    """What a relevance refusal appends: the reconciliation record once, then the decision."""
    events: list[DeliveryEvent] = []
    if verdict.reconcile is not None and delivery.reconciliation is None:
        events.append(verdict.reconcile)
    if verdict.action == "supersede":
        events.append(DeliveryDecided(decision="supersede", reason=verdict.reason))
        by = verdict.by_delivery_id or ""
        events.append(DeliverySuperseded(by_delivery_id=by, reason=verdict.reason))
    else:
        events.append(DeliveryDecided(decision="suppress", reason=verdict.reason))
        events.append(DeliverySuppressed(reason=verdict.reason))
    return events


def _newer_intent(
    delivery: DeliveryState,
    sources: list[OperationFacts],
    session_ops: Iterable[OperationFacts],
) -> tuple[OperationFacts, OperationFacts] | None:
    keyed = [o for o in sources if o.subject_key and o.admitted_seq]
    if not keyed:
        return None
    own = set(delivery.source_operation_ids)
    newest: tuple[OperationFacts, OperationFacts] | None = None
    for other in session_ops:
        if other.operation_id in own or not other.admitted_seq:
            continue
        for op in keyed:
            if other.subject_key == op.subject_key and other.admitted_seq > op.admitted_seq and (
                newest is None or other.admitted_seq > newest[1].admitted_seq
            ):
                newest = (op, other)
    return newest


# --------------------------------------------------------------------------- timing


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
class SessionView:
    """The projections of one session the gate decides from."""

    channel: ChannelState | None
    ops: Mapping[str, OperationFacts]
    session_ops: tuple[OperationFacts, ...] = ()
    # batch id -> final delivery id, for the finals that exist.
    finals: Mapping[str, str] = field(default_factory=dict)


def decide_delivery(
    delivery: DeliveryState, view: SessionView, now: datetime, policy: GatePolicy
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
