"""The ActivityGate's inputs: a per-session channel projection and the operation facts.

Both folds are pure and never refuse: the delivery-policy service keeps a usable view
whatever arrives. The decisions made from them are in `relevance.py` (is it still worth
saying), `delivery_gate.py` (when and how to say it) and `gate_policy.py` (the timings).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Literal

from libs.events import (
    AgentHandedOff,
    ChannelConnected,
    ChannelDisconnected,
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

ChannelKind = Literal["chat", "voice", "agent"]

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
