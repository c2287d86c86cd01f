"""What admission needs to know about live operations, kept current from the stream.

Counters of open operations per tool and scope (for backpressure), recent admissions per
user (for frequency limits), open operations per subject (for supersession) and per
argument digest (for coalescing). Fed by an ordered consumer over the operations stream
(`follow`; the interaction surface feeds it from its own view's follower instead, so the
stream is delivered to that process once), and by admission itself right after each
append (read-your-writes: a burst in one process sees its own admissions immediately; the
stream's copy of the same event is skipped by sequence).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy

from libs.bus import Context, Topology, position
from libs.domain import OperationState, OpStatus, Projection, operation
from libs.events import OPERATIONS, Envelope, EventDecodeError, OperationEvent

from .intent import digest
from .rules import Load

log = logging.getLogger(__name__)

_OPEN = frozenset(
    {
        OpStatus.ADMITTED,
        OpStatus.RUNNING,
        OpStatus.FAILED_RETRYABLE,
        OpStatus.UNKNOWN,
        OpStatus.CANCEL_REQUESTED,
    }
)

# States in which an operation stands for its intent (a repeat joins it).
_INTENT_HOLDERS = frozenset({OpStatus.AWAITING_CONFIRMATION, OpStatus.ADMITTED})


def _key(env: Envelope[OperationEvent]) -> str:
    return env.operation_id or ""


class LoadView:
    """Live operation indexes for admission decisions."""

    def __init__(self) -> None:
        self.projection: Projection[OperationState, OperationEvent] = Projection(
            operation.evolve, _key
        )
        self._open: Counter[tuple[str, ...]] = Counter()
        self._by_intent: dict[str, str] = {}
        self._recent: defaultdict[tuple[str, str], deque[datetime]] = defaultdict(deque)
        self._by_subject: defaultdict[tuple[str, str], set[str]] = defaultdict(set)
        self._by_digest: defaultdict[tuple[str, str, str], set[str]] = defaultdict(set)
        self._sub: Subscription | None = None
        self.caught_up = asyncio.Event()

    # -- reads -------------------------------------------------------------------------
    def get(self, operation_id: str) -> OperationState | None:
        """An operation's current state, if seen."""
        return self.projection.get(operation_id)

    def by_intent(self, intent_key: str) -> OperationState | None:
        """The latest operation admitted for an intent."""
        op = self._by_intent.get(intent_key)
        return self.projection.get(op) if op else None

    def load(self, tool: str, tenant_id: str, user_id: str) -> Load:
        """Open operations of a tool: globally, for the tenant, for the user."""
        return Load(
            global_open=self._open[("g", tool)],
            tenant_open=self._open[("t", tool, tenant_id)],
            user_open=self._open[("u", tool, tenant_id, user_id)],
        )

    def reserve(self, tool: str, tenant_id: str, user_id: str, delta: int = 1) -> None:
        """Count an admission being written, so a burst in this process sees it at once."""
        for key in (("g", tool), ("t", tool, tenant_id), ("u", tool, tenant_id, user_id)):
            self._open[key] += delta

    def recent(self, tool: str, user_id: str, now: datetime, window: timedelta) -> int:
        """Admissions of a tool by a user within the window."""
        stamps = self._recent[(tool, user_id)]
        while stamps and stamps[0] < now - window:
            stamps.popleft()
        return len(stamps)

    def on_subject(self, session_id: str, subject_key: str) -> list[OperationState]:
        """Every operation a session admitted about the same subject, in any state."""
        ids = self._by_subject.get((session_id, subject_key), set())
        return [s for op in sorted(ids) if (s := self.projection.get(op)) is not None]

    def open_with_digest(
        self, tenant_id: str, tool: str, args_digest: str
    ) -> OperationState | None:
        """An open operation of the tenant with identical arguments (to coalesce reads)."""
        for op in sorted(self._by_digest.get((tenant_id, tool, args_digest), set())):
            state = self.projection.get(op)
            if state is not None:
                return state
        return None

    # -- writes ------------------------------------------------------------------------
    def apply(self, env: Envelope[OperationEvent], stream_seq: int) -> None:
        """Fold one event and keep the indexes in step with the state change."""
        before = self.projection.get(_key(env))
        after = self.projection.apply(env, stream_seq)
        if after is None or after is before:
            return
        was_open = before is not None and before.status in _OPEN
        is_open = after.status in _OPEN
        entered = before is None or before.status is not after.status
        if entered and after.intent_key and after.status in _INTENT_HOLDERS:
            self._by_intent[after.intent_key] = after.operation_id
        if entered and after.status is OpStatus.ADMITTED:
            self._recent[(after.tool, after.user_id or "")].append(env.occurred_at)
            if after.subject_key:
                self._by_subject[(after.session_id, after.subject_key)].add(after.operation_id)
        if was_open != is_open:
            self._count(after, +1 if is_open else -1)
            self._index(after, add=is_open)

    def _count(self, state: OperationState, delta: int) -> None:
        tenant, user = state.tenant_id or "", state.user_id or ""
        for key in (("g", state.tool), ("t", state.tool, tenant), ("u", state.tool, tenant, user)):
            self._open[key] += delta

    def _index(self, state: OperationState, *, add: bool) -> None:
        key = (state.tenant_id or "", state.tool, digest(state.arguments))
        if add:
            self._by_digest[key].add(state.operation_id)
        else:
            self._by_digest[key].discard(state.operation_id)
            if not self._by_digest[key]:
                del self._by_digest[key]

    async def follow(
        self,
        js: JetStreamContext,
        topology: Topology,
        *,
        heartbeat_s: float = 0.5,
        also: Sequence[Callable[[Envelope[OperationEvent], int], None]] = (),
    ) -> None:
        """Subscribe to the whole operations stream from the start, in order (`heartbeat_s`:
        `BusTimings.follow_heartbeat_s`, how soon a consumer lost with its node is noticed).
        `also`: other folds of the stream in this process, fed each decoded event from this
        one follower, so the stream is delivered and decoded once."""
        stream = topology.stream_name(Context.OPERATIONS)
        info = await js.stream_info(stream)
        target = info.state.last_seq
        if target == 0:
            self.caught_up.set()

        async def on_msg(msg: Msg) -> None:
            seq = position(msg.reply).stream_seq
            try:
                env = OPERATIONS.decode(msg.data)
            except EventDecodeError as exc:
                log.warning("load view skipped undecodable event %d: %s", seq, exc.reason)
            else:
                self.apply(env, seq)
                for fold in also:
                    fold(env, seq)
            if seq >= target:
                self.caught_up.set()

        self._sub = await js.subscribe(
            topology.context_filter(Context.OPERATIONS),
            stream=stream,
            ordered_consumer=True,
            idle_heartbeat=heartbeat_s,
            deliver_policy=DeliverPolicy.ALL,
            cb=on_msg,
        )

    async def close(self) -> None:
        """Stop following the stream."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
