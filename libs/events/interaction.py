"""Interaction events: what happened in the conversation and on its channel."""

from __future__ import annotations

from typing import Literal

from .base import EventPart, StreamEvent

# `agent`: an external agent (Agent API) that runs its own model and media.
Channel = Literal["chat", "voice", "agent"]


class _Event(StreamEvent, frozen=True, kw_only=True):
    pass


class SessionOpened(_Event, frozen=True, kw_only=True, tag="session.opened"):
    """A conversation began for a user of a tenant, with its first active agent."""

    user_id: str
    tenant_id: str
    agent: str
    token_hash: str


class SessionClosed(_Event, frozen=True, kw_only=True, tag="session.closed"):
    """The session was closed; no further turns are accepted."""

    reason: str


class TurnReceived(_Event, frozen=True, kw_only=True, tag="turn.received"):
    """The user said or wrote something that opens a turn."""

    channel: Channel
    text: str
    client_turn_id: str | None = None


class RepliedOperation(EventPart, frozen=True, kw_only=True):
    """What admission answered for one operation of a replied turn."""

    operation_id: str
    tool: str
    status: str
    batch_id: str | None = None


class TurnReplied(_Event, frozen=True, kw_only=True, tag="turn.replied"):
    """The assistant's reply to a turn was written to history."""

    text: str
    operation_ids: tuple[str, ...] = ()
    attached_delivery_ids: tuple[str, ...] = ()
    # The turn's answer to its caller is rebuilt from this reply when the client repeats
    # its client_turn_id, so the reply carries admission's answer for each operation.
    operations: tuple[RepliedOperation, ...] = ()


class AgentHandedOff(_Event, frozen=True, kw_only=True, tag="agent.handed_off"):
    """The active agent changed; its context was either fresh or carried over."""

    from_agent: str
    to_agent: str
    context: Literal["fresh", "carried"] = "fresh"


class UserActivity(_Event, frozen=True, kw_only=True, tag="user.activity"):
    """Chat typing indicator: the text channel's equivalent of speaking."""

    typing: bool


class SpeechStarted(_Event, frozen=True, kw_only=True, tag="speech.started"):
    """Voice activity detection saw the user start speaking."""

    stream_ms: int


class SpeechStopped(_Event, frozen=True, kw_only=True, tag="speech.stopped"):
    """Endpointing decided the user stopped speaking."""

    stream_ms: int


class ResponseStarted(_Event, frozen=True, kw_only=True, tag="response.started"):
    """A model generation began (it can still be cancelled)."""


class ResponseFinished(_Event, frozen=True, kw_only=True, tag="response.finished"):
    """A model generation ended, either completed or cancelled."""

    cancelled: bool = False


class PlaybackStarted(_Event, frozen=True, kw_only=True, tag="playback.started"):
    """Audio for an utterance was sent to the channel, followed by its mark."""

    text: str
    duration_ms: int


class PlaybackFinished(_Event, frozen=True, kw_only=True, tag="playback.finished"):
    """The channel confirmed an utterance played, or a clear flushed it unheard."""

    heard: bool
    played_ms: int
    unheard_ms: int = 0


class ReplyTruncated(_Event, frozen=True, kw_only=True, tag="reply.truncated"):
    """Voice: the reply of `turn_id` was cut by a barge-in; history keeps only `text` (heard)."""

    text: str
    played_ms: int
    unheard_ms: int
    # Closings the reply carried whose words were not heard: the kept text no longer has them.
    unheard_delivery_ids: tuple[str, ...] = ()


class ToolCallsReceived(_Event, frozen=True, kw_only=True, tag="tool_calls.received"):
    """An external agent's model proposed a batch of tool calls (Agent API)."""

    tool_call_ids: tuple[str, ...]
    # What the user said that led to the calls, when the agent passes it along.
    user_text: str | None = None


class ChannelConnected(_Event, frozen=True, kw_only=True, tag="channel.connected"):
    """A phone call or an external agent's channel attached to the session."""

    channel: Channel
    connection_id: str


class ChannelDisconnected(_Event, frozen=True, kw_only=True, tag="channel.disconnected"):
    """A phone call or an external agent's channel left the session."""

    channel: Channel
    connection_id: str
    reason: str = "closed"


class HearingAsked(_Event, frozen=True, kw_only=True, tag="hearing.asked"):
    """The caller was asked whether a request was heard right ("Did you say ...?")."""

    # The request as heard: it runs as such on a yes.
    text: str
    question: str
    connection_id: str


class HearingSettled(_Event, frozen=True, kw_only=True, tag="hearing.settled"):
    """The question about a hearing was answered, or a new request replaced it."""

    answer: Literal["yes", "no", "replaced"]


InteractionEvent = (
    SessionOpened
    | SessionClosed
    | TurnReceived
    | TurnReplied
    | AgentHandedOff
    | UserActivity
    | SpeechStarted
    | SpeechStopped
    | ResponseStarted
    | ResponseFinished
    | PlaybackStarted
    | PlaybackFinished
    | ReplyTruncated
    | ToolCallsReceived
    | ChannelConnected
    | ChannelDisconnected
    | HearingAsked
    | HearingSettled
)
