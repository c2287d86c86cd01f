"""The surface's writes, through the one write path (`libs/bus/repository.py`).

The surface decides from its live view, so its two repositories (a session's interaction
events, a delivery's events) read their state from the view (`ViewSource`): the current
state and the subject's last sequence as the view holds them; after a lost race, the view
caught up on that stream; after an append, a wait until the view applied it (read your own
writes), unless the broker found a duplicate. Every guarded append takes its expected
sequence from there, and every retry follows the one `ConflictRetry` policy.

`SurfaceWrites` is built once by the composition root and handed to everything that writes
(the `Surface`, the turns, the delivery executor and its channels).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from libs.bus import (
    CONFLICT_RETRY,
    Aggregate,
    Appended,
    ConflictRetry,
    Context,
    EventStore,
    Repository,
    Topology,
    aggregates,
)
from libs.clock import Clock, Ids
from libs.domain import DeliveryState, SessionState, session
from libs.domain.delivery import envelope_for as delivery_envelope
from libs.events import (
    INTERACTION,
    DeliveryEvent,
    Envelope,
    InteractionEvent,
    TurnReplied,
)

from .view import SurfaceView

S = TypeVar("S")
T = TypeVar("T")


class ViewSource(Generic[S]):
    """A repository's state, read from the live view instead of folded from the store."""

    def __init__(
        self,
        view: SurfaceView,
        context: Context,
        read: Callable[[str], tuple[S | None, int]],
    ) -> None:
        self._view = view
        self._context = context
        self._read = read

    async def current(self, subject: str) -> tuple[S | None, int]:
        """The state the view holds for the subject's aggregate, and its last sequence."""
        return self._read(subject)

    async def refresh(self, subject: str) -> None:
        """Someone wrote since the view's state: catch the view up on this stream only."""
        await self._view.sync(contexts=(self._context,))

    async def stored(self, envelope: Envelope[Any], appended: Appended) -> None:
        """Until the view applied the append (a duplicate was applied long ago, or will be
        by the writer that won)."""
        if not appended.duplicate:
            await self._view.wait_applied(self._context, appended.seq)


def aggregate_id(subject: str) -> str:
    """The aggregate's id in its subject (`<prefix>.<context>.<session>.<id>.*`)."""
    return subject.split(".")[-2]


class SurfaceWrites:
    """The surface's repositories, and the writes every channel makes the same way."""

    def __init__(
        self,
        view: SurfaceView,
        store: EventStore,
        topology: Topology,
        *,
        clock: Clock,
        ids: Ids,
        retry: ConflictRetry = CONFLICT_RETRY,
    ) -> None:
        self.view = view
        self.topology = topology
        self.retry = retry
        self._clock = clock
        self._ids = ids
        sessions: Aggregate[SessionState, InteractionEvent] = Aggregate(
            label="interaction", stream=topology.stream_name(Context.INTERACTION),
            codec=INTERACTION, evolve=session.evolve,
        )
        self.interaction = Repository(
            store, sessions, clock=clock, ids=ids, retry=retry,
            source=ViewSource(view, Context.INTERACTION, self._session),
        )
        self.deliveries = Repository(
            store, aggregates.deliveries(topology), clock=clock, ids=ids, retry=retry,
            source=ViewSource(view, Context.DELIVERIES, self._delivery),
        )

    def _session(self, subject: str) -> tuple[SessionState | None, int]:
        session_id = self.topology.session_of(subject)
        found = self.view.log(session_id)
        return self.view.session(session_id), found.session_seq if found is not None else 0

    def _delivery(self, subject: str) -> tuple[DeliveryState | None, int]:
        delivery_id = aggregate_id(subject)
        return self.view.deliveries.get(delivery_id), self.view.delivery_seq(delivery_id)

    def active_agent(self, state: DeliveryState) -> str | None:
        """The agent a delivery's messages go out under: the session's active one."""
        found = self.view.session(state.session_id)
        return found.agent if found is not None else state.agent

    async def delivery(self, state: DeliveryState, event: DeliveryEvent) -> int:
        """A delivery event guarded by the sequence the view holds for the delivery; its
        stream sequence. A lost race raises `ConcurrencyConflict` (the caller reads again)."""
        env = delivery_envelope(
            state, event, event_id=self._ids.new("ev"), now=self._clock.now(),
            agent=self.active_agent(state),
        )
        subject = self.topology.delivery_subject(state.session_id, state.delivery_id)
        appended = await self.deliveries.append(
            subject, env, expected=self.view.delivery_seq(state.delivery_id)
        )
        return appended.seq

    async def record(self, env: Envelope[Any], msg_id: str | None = None) -> Appended:
        """An interaction fact no decision guards, stored once under `msg_id`."""
        subject = self.topology.session_subject(env.session_id)
        return await self.interaction.record(subject, env, msg_id=msg_id)

    async def write_message(self, state: DeliveryState) -> None:
        """A delivery's text in the session's history, once per delivery (even if two
        writers race inside the dedup window)."""
        env = delivery_envelope(
            state, TurnReplied(text=state.text), event_id=self._ids.new("ev"),
            now=self._clock.now(), agent=self.active_agent(state),
        )
        await self.record(env, f"message-{state.delivery_id}")

    async def retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt` again after each lost race (the whole view caught up first), under the
        one policy (`Repository.retrying`); `TooManyConflicts` once every attempt lost."""
        return await self.deliveries.retrying(what, attempt, refresh=self.view.sync)
