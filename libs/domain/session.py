"""Session projection: identity, active agent, visible history and channel activity."""

from __future__ import annotations

from dataclasses import dataclass, field

from libs.events import (
    AgentHandedOff,
    ChannelConnected,
    ChannelDisconnected,
    Envelope,
    HearingAsked,
    HearingSettled,
    InteractionEvent,
    PlaybackFinished,
    PlaybackStarted,
    ReplyTruncated,
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

from .evolving import evolved


@dataclass(frozen=True, slots=True)
class Message:
    """One visible message of the history (only what the user could see or hear)."""

    role: str
    text: str
    turn_id: str | None
    delivery_id: str | None = None
    # The generation it came from: a cut reply is found by it even when it carries closings.
    response_id: str | None = None


@dataclass(frozen=True, slots=True)
class PendingHearing:
    """A "did you say ...?" the caller has not answered: asked again on the next call."""

    text: str
    question: str


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session as rebuilt from its interaction events."""

    session_id: str
    user_id: str
    tenant_id: str
    agent: str
    token_hash: str
    closed: bool = False
    messages: tuple[Message, ...] = ()
    user_active: bool = False
    response_active: bool = False
    playback_active: bool = False
    connections: frozenset[str] = field(default_factory=frozenset)
    # The channel the conversation last came through (chat, voice or an external agent).
    last_channel: str = "chat"
    # A hearing question still waiting for the caller's yes or no.
    pending_hearing: PendingHearing | None = None
    version: int = 0


class SessionError(Exception):
    """An interaction event that contradicts the session's history."""


def evolve(state: SessionState | None, env: Envelope[InteractionEvent]) -> SessionState:
    """Apply one interaction event to a session."""
    event = env.event
    if state is None:
        if not isinstance(event, SessionOpened):
            raise SessionError(f"{type(event).__name__} before session.opened")
        return SessionState(
            session_id=env.session_id,
            user_id=event.user_id,
            tenant_id=event.tenant_id,
            agent=event.agent,
            token_hash=event.token_hash,
            version=1,
        )
    if state.closed:
        raise SessionError(f"session {state.session_id} is closed")
    state = evolved(state, version=state.version + 1)
    match event:
        case SessionOpened():
            raise SessionError(f"session {state.session_id} is already open")
        case SessionClosed():
            return evolved(state, closed=True)
        case TurnReceived(text=text):
            # Its client turn id is indexed by the surface's view (`SessionLog.client_turns`).
            message = Message(role="user", text=text, turn_id=env.turn_id)
            return evolved(
                state, messages=(*state.messages, message), last_channel=event.channel
            )
        case TurnReplied(text=text):
            message = Message(
                role="assistant", text=text, turn_id=env.turn_id, delivery_id=env.delivery_id,
                response_id=env.response_id,
            )
            return evolved(state, messages=(*state.messages, message))
        case AgentHandedOff(to_agent=agent):
            return evolved(state, agent=agent)
        case UserActivity(typing=typing):
            return evolved(state, user_active=typing)
        case SpeechStarted():
            return evolved(state, user_active=True)
        case SpeechStopped():
            return evolved(state, user_active=False)
        case ResponseStarted():
            return evolved(state, response_active=True)
        case ResponseFinished():
            return evolved(state, response_active=False)
        case PlaybackStarted():
            return evolved(state, playback_active=True)
        case PlaybackFinished():
            return evolved(state, playback_active=False)
        case ReplyTruncated(text=text, unheard_delivery_ids=unheard):
            cut = _truncated(state.messages, env.turn_id, env.response_id, text, unheard)
            return evolved(state, messages=cut)
        case ToolCallsReceived():
            # The agent's own model talks to the user: nothing enters holdline's history.
            return evolved(state, last_channel="agent")
        case ChannelConnected(connection_id=conn, channel=kind):
            return evolved(state, connections=state.connections | {conn}, last_channel=kind)
        case ChannelDisconnected(connection_id=conn, channel=kind):
            return evolved(state, connections=state.connections - {conn}, last_channel=kind)
        case HearingAsked(text=text, question=question):
            return evolved(state, pending_hearing=PendingHearing(text, question))
        case HearingSettled():
            return evolved(state, pending_hearing=None)
    raise SessionError(f"unhandled interaction event {type(event).__name__}")


def _truncated(
    messages: tuple[Message, ...],
    turn_id: str | None,
    response_id: str | None,
    heard: str,
    unheard: tuple[str, ...] = (),
) -> tuple[Message, ...]:
    """The cut reply reduced to what was heard (removed if nothing was).

    The reply is the message of that generation (`response_id`), closings it carried
    included; without one, the turn's last reply that is not a closing of its own.
    """
    for index in range(len(messages) - 1, -1, -1):
        found = messages[index]
        if response_id is not None and found.response_id is not None:
            match = found.response_id == response_id
        else:
            match = found.turn_id == turn_id and found.delivery_id is None
        if found.role == "assistant" and match:
            rest = messages[index + 1 :]
            if not heard.strip():
                return (*messages[:index], *rest)
            # A message names a closing only while it still holds its words.
            delivery_id = None if found.delivery_id in unheard else found.delivery_id
            kept = evolved(found, text=heard.strip(), delivery_id=delivery_id)
            return (*messages[:index], kept, *rest)
    return messages
