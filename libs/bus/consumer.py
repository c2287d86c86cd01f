"""Durable pull consumers: explicit ack, heartbeats for long handlers, bounded redelivery, DLQ.

Messages of one group (by default, one session) are handled in order; different groups
run concurrently. A
handler that keeps failing is retried with growing delays until `max_deliver`, then its
message goes to the dead-letter stream with the reason and is acknowledged, so it leaves a
work-queue stream and never blocks the sessions behind it.

A consumer given a `Partition` handles only the sessions that partition owns and acknowledges
every other message unread: each partition's durable consumer sees the whole stream.

Messages come through one standing pull request (`pull.py`), asked again only when used up
or ended, not two requests per wave as nats-py's `fetch` makes. Each is taken where the
client's parser reads it: queued behind its group's messages, or given a task that handles
its group's queue in order, so a delivery costs one task at most and no lock.

Recovery is by design, not by timeout: the ack wait is short (2 s, `HOLDLINE_ACK_WAIT_S`)
because a live handler heartbeats (`in_progress`) every third of it, and a consumer silent
for a few seconds checks that the broker still has it (re-declaring and resubscribing after
a broker restart). About 490 lines: fetching, ordering per group, retries, dead letters and
the lost-consumer check are one loop's parts and read best together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from libs import tracing
from libs.events import Envelope, EventCodec, EventDecodeError
from libs.metrics import CONSUMER_LAG

from .deadletter import DEAD_LETTER_ENCODER, DeadLetter
from .declare import ConsumerSpec, ensure_consumer
from .position import position
from .pull import StandingPull
from .store import broker_unavailable
from .topology import Context, Partition, Topology

log = logging.getLogger(__name__)

# A standing pull request lives this many fetch timeouts (1 s by default).
STANDING_PULL_FETCHES = 2.0



B = TypeVar("B")


class Poison(Exception):
    """Raised by a handler for a message that can never succeed: dead-letter it now."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Received(Generic[B]):
    """A decoded message with its place in the stream."""

    envelope: Envelope[B]
    subject: str
    stream_seq: int
    num_delivered: int
    # As the broker stored them with the message (the guards it was appended under included).
    headers: dict[str, str] | None = None


Handler = Callable[[Received[B]], Awaitable[None]]


def _redelivery_delay(base_s: float, num_delivered: int) -> float:
    # Exponential, capped: a flapping dependency gets room without stalling a session long.
    return float(min(base_s * (2 ** max(0, num_delivered - 1)), 30.0))


class DurableConsumer(Generic[B]):
    """Runs a handler over a durable pull consumer until stopped."""

    def __init__(
        self,
        js: JetStreamContext,
        spec: ConsumerSpec,
        codec: EventCodec[B],
        handler: Handler[B],
        *,
        topology: Topology,
        source: Context,
        redelivery_backoff_s: float = 1.0,
        batch: int = 64,
        fetch_timeout_s: float = 1.0,
        heartbeat_s: float | None = None,
        on_dead_letter: Callable[[DeadLetter], None] | None = None,
        group_by: Callable[[str], str] | None = None,
        max_in_flight: int = 256,
        partition: Partition | None = None,
        broker_patience_s: float = 30.0,
        check_after_s: float = 3.0,
    ) -> None:
        self._js = js
        self.spec = spec
        self._codec = codec
        self._handler = handler
        self._topology = topology
        self._source = source
        self._backoff_s = redelivery_backoff_s
        self._batch = batch
        self._fetch_timeout_s = fetch_timeout_s
        # Tell the broker we are alive well before ack_wait runs out.
        self._heartbeat_s = heartbeat_s or max(spec.ack_wait_s / 3.0, 0.05)
        self._on_dead_letter = on_dead_letter
        # Messages with the same group key are handled one at a time, in stream order.
        self._group_by = group_by
        self._max_in_flight = max_in_flight
        # How long a handler waits out an unavailable broker (`_patiently`), and the silence
        # after which the consumer checks that the broker still has it (`_lost`).
        self._broker_patience_s = broker_patience_s
        self._check_after_s = check_after_s
        self._partition = partition
        # The labelled gauge once, not a label lookup per message.
        self._lag = CONSUMER_LAG.labels(consumer=spec.durable)
        self._lag_seen = -1
        self._in_flight: set[asyncio.Task[None]] = set()
        # Each group's messages in hand, the one being handled first; a group is here
        # while its task runs.
        self._groups: dict[str, deque[Msg]] = {}
        self._in_hand = 0
        self._freed = asyncio.Event()
        self._pull: StandingPull | None = None
        self._stop = asyncio.Event()
        self._reconnects = 0
        self.ready = asyncio.Event()

    @property
    def stopped(self) -> bool:
        """Whether stop() was called."""
        return self._stop.is_set()

    def stop(self) -> None:
        """Ask the loop to stop fetching; messages in hand are finished first."""
        self._stop.set()
        if self._pull is not None:
            self._pull.interrupt()

    async def abandon(self) -> int:
        """Cancel the messages still in hand (each is NAKed for redelivery); how many."""
        in_hand = self._in_hand
        tasks = list(self._in_flight)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=5.0)
        return in_hand

    async def run(self) -> None:
        """Declare the consumer, then take and handle messages until stopped.

        Messages keep coming while handlers run (up to `max_in_flight` in hand at once), so
        one slow message never stalls the others; messages of one group still run in order.
        """
        await ensure_consumer(self._js, self.spec)
        sub = await self._subscribe()
        pull = self._pull = self._standing(sub)
        self.ready.set()
        loop = asyncio.get_running_loop()
        heard = loop.time()
        try:
            while not self._stop.is_set():
                room = self._max_in_flight - self._in_hand
                if room <= 0:
                    self._freed.clear()
                    await self._freed.wait()
                    continue
                if loop.time() - heard >= self._check_after_s:
                    fresh = await self._lost(sub)
                    if fresh is not sub:
                        pull.close()
                        sub, pull = fresh, self._standing(fresh)
                        self._pull = pull
                    heard = loop.time()
                try:
                    alive = await pull.wait(room, self._fetch_timeout_s)
                except (nats.errors.ConnectionClosedError, nats.errors.NoServersError):
                    return
                except (APIError, nats.errors.Error) as exc:
                    # The broker is restarting or unreachable; the client reconnects by itself.
                    log.warning("pull request on %s failed: %s", self.spec.durable, exc)
                    await asyncio.sleep(0.2)
                    continue
                if alive:
                    heard = loop.time()
        finally:
            # No more deliveries first: the handlers still running ack without the
            # subscription, and what the broker sends meanwhile would only be handed back.
            pull.close()
            self._pull = None
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            if self._in_flight:
                await asyncio.wait(self._in_flight, timeout=self.spec.ack_wait_s)

    def _take(self, msg: Msg) -> None:
        """A message just read: queue it behind its group's, or start its group's task."""
        if self._stop.is_set():
            # Read after stop() (the request was still open): another process takes it now.
            self._spawn(self._hand_back(msg))
            return
        if not self._owns(msg.subject):
            # Another partition's session: its own consumer handles it.
            self._spawn(self._ack_unread(msg))
            return
        key = self._group_key(msg.subject)
        self._in_hand += 1
        queue = self._groups.get(key)
        if queue is not None:
            queue.append(msg)
            return
        queue = self._groups[key] = deque((msg,))
        self._spawn(self._run_group(key, queue))

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    @staticmethod
    async def _ack_unread(msg: Msg) -> None:
        with contextlib.suppress(Exception):
            await msg.ack()

    @staticmethod
    async def _hand_back(msg: Msg) -> None:
        with contextlib.suppress(Exception):
            await msg.nak()

    def _standing(self, sub: JetStreamContext.PullSubscription) -> StandingPull:
        # The request lives two fetch timeouts; heartbeats say the broker still serves it.
        # Short, because a process that stopped (SIGSTOP, a stalled VM) keeps its request,
        # and what the broker pushes into it waits that long plus the ack wait.
        return StandingPull(
            sub,
            batch=self._batch,
            expires_s=max(STANDING_PULL_FETCHES * self._fetch_timeout_s, 1.0),
            heartbeat_s=max(self._fetch_timeout_s, 0.1),
            reconnects=self._reconnect_count,
            on_message=self._take,
        )

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        self._reconnects = self._reconnect_count()
        return await self._js.pull_subscribe_bind(
            durable=self.spec.durable, stream=self.spec.stream
        )

    def _reconnect_count(self) -> int:
        return int(self._js._nc.stats.get("reconnects", 0))

    async def _lost(
        self, sub: JetStreamContext.PullSubscription
    ) -> JetStreamContext.PullSubscription:
        """After a silence: make sure the broker still has this consumer and still serves us.

        A broker restarted from a lost or rolled-back store comes back without the durable
        consumer, and a pull subscription made before a reconnect can stay silent; either
        way, fetching on would wait forever. Re-declaring and resubscribing costs one round
        trip per silence, and an idle consumer is exactly when that is cheap.
        """
        try:
            await self._js.consumer_info(self.spec.stream, self.spec.durable)
        except NotFoundError:
            log.warning("consumer %s is gone from the broker; declaring it again",
                        self.spec.durable)
            try:
                await ensure_consumer(self._js, self.spec)
            except Exception as exc:  # noqa: BLE001 - the broker is still coming back: next time
                log.info("re-declaring %s failed: %r", self.spec.durable, exc)
                return sub
        except Exception as exc:  # noqa: BLE001 - unreachable right now: check again later
            log.info("checking consumer %s failed: %r", self.spec.durable, exc)
            return sub
        else:
            if self._reconnect_count() == self._reconnects:
                return sub
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        try:
            fresh = await self._subscribe()
        except Exception as exc:  # noqa: BLE001 - keep the old one and try again after a silence
            log.info("resubscribing %s failed: %r", self.spec.durable, exc)
            return sub
        log.info("consumer %s resubscribed", self.spec.durable)
        return fresh

    async def _run_group(self, key: str, queue: deque[Msg]) -> None:
        """Handle a group's messages one at a time, in the order they were read."""
        try:
            while queue:
                msg = queue[0]
                try:
                    await self._handle_one(msg)
                except Exception:
                    log.exception("consumer %s failed on %s", self.spec.durable, msg.subject)
                queue.popleft()
                self._done_one()
        except asyncio.CancelledError:
            # Abandoned at shutdown: hand this group's messages back now, not after ack_wait.
            while queue:
                with contextlib.suppress(Exception):
                    await queue.popleft().nak()
                self._done_one()
            raise
        finally:
            if self._groups.get(key) is queue:
                del self._groups[key]

    def _done_one(self) -> None:
        self._in_hand -= 1
        self._freed.set()

    def _owns(self, subject: str) -> bool:
        if self._partition is None or self._partition.count == 1:
            return True
        try:
            return self._partition.owns(self._topology.session_of(subject))
        except ValueError:
            # No session in the subject: nothing to partition by, so every partition handles it.
            return True

    def _group_key(self, subject: str) -> str:
        if self._group_by is not None:
            return self._group_by(subject)
        try:
            return self._topology.session_of(subject)
        except ValueError:
            return subject

    async def _handle_one(self, msg: Msg) -> None:
        meta = position(msg.reply)
        try:
            envelope = self._codec.decode(msg.data)
        except EventDecodeError as exc:
            await self._dead_letter(msg, exc.reason, exc.detail)
            return
        received = Received(
            envelope=envelope,
            subject=msg.subject,
            stream_seq=meta.stream_seq,
            num_delivered=meta.num_delivered,
            headers=msg.headers,
        )
        if meta.num_pending != self._lag_seen:
            # The gauge takes a lock on every set; under a steady load the lag rarely moves.
            self._lag_seen = meta.num_pending
            self._lag.set(meta.num_pending)
        heartbeat = _Heartbeat(msg, self._heartbeat_s)
        try:
            with tracing.handler_span(
                self.spec.durable, msg.subject, msg.headers, envelope.event_id
            ):
                await self._patiently(received)
        except Poison as exc:
            await self._dead_letter(msg, "poison", exc.reason)
            return
        except Exception as exc:  # noqa: BLE001 - a failing handler is retried, then dead-lettered
            if meta.num_delivered >= self.spec.max_deliver:
                await self._dead_letter(msg, "max_deliver", repr(exc))
            else:
                log.warning(
                    "handler %s failed on %s (delivery %d): %r %s",
                    self.spec.durable,
                    msg.subject,
                    meta.num_delivered,
                    exc,
                    exc,
                )
                with contextlib.suppress(Exception):
                    await msg.nak(delay=_redelivery_delay(self._backoff_s, meta.num_delivered))
            return
        finally:
            heartbeat.cancel()
        await msg.ack()

    async def _patiently(self, received: Received[B]) -> None:
        """Run the handler; while the broker cannot answer, run it again here.

        A node dying makes its streams and consumers elect new leaders for a few seconds.
        Failing the delivery then would spend `max_deliver` on the broker's absence and
        dead-letter good work; the message stays in hand (the heartbeat keeps it) and the
        idempotent handler runs again once the broker answers, for up to
        `broker_patience_s` (HOLDLINE_BROKER_PATIENCE_S through `BusTimings`).
        """
        deadline = asyncio.get_running_loop().time() + self._broker_patience_s
        delay = 0.1
        while True:
            try:
                await self._handler(received)
            except Exception as exc:
                if not broker_unavailable(exc) or asyncio.get_running_loop().time() >= deadline:
                    raise
                log.info("%s: broker unavailable (%r); handling again", self.spec.durable, exc)
            else:
                return
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _dead_letter(self, msg: Msg, reason: str, error: str) -> None:
        meta = position(msg.reply)
        record = DeadLetter(
            source_stream=meta.stream,
            source_subject=msg.subject,
            source_seq=meta.stream_seq,
            consumer=self.spec.durable,
            num_delivered=meta.num_delivered,
            reason=reason,
            error=error[:2000],
            payload=msg.data,
            dead_lettered_at=datetime.now(UTC),
        )
        try:
            session = self._topology.session_of(msg.subject)
        except ValueError:
            session = "unknown"
        subject = self._topology.dlq_subject(self._source, session)
        # The id makes a dead-letter publish repeated after a crash land once.
        dedup = f"dlq:{meta.stream}:{meta.stream_seq}:{self.spec.durable}"
        await self._js.publish(
            subject, DEAD_LETTER_ENCODER.encode(record), headers={"Nats-Msg-Id": dedup}
        )
        log.error(
            "dead-lettered %s seq %d from %s: %s",
            msg.subject,
            meta.stream_seq,
            self.spec.durable,
            reason,
        )
        if self._on_dead_letter is not None:
            self._on_dead_letter(record)
        # Acknowledge only after the dead letter is stored: nothing is lost in between.
        await msg.ack()


class _Heartbeat:
    """`in_progress` every `every_s` while a handler runs, on a loop timer.

    Most handlers finish well inside the first interval: a timer handle per message costs
    far less than a task per message, and a task is made only when a beat is due.
    """

    __slots__ = ("_every_s", "_handle", "_loop", "_msg", "_task")

    def __init__(self, msg: Msg, every_s: float) -> None:
        self._msg = msg
        self._every_s = every_s
        self._loop = asyncio.get_running_loop()
        self._task: asyncio.Task[None] | None = None
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(every_s, self._beat)

    def _beat(self) -> None:
        if self._task is None or self._task.done():
            self._task = self._loop.create_task(self._send())
        self._handle = self._loop.call_later(self._every_s, self._beat)

    async def _send(self) -> None:
        with contextlib.suppress(Exception):
            await self._msg.in_progress()

    def cancel(self) -> None:
        """Stop beating: the handler is done, so no beat may follow its ack."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._task is not None:
            self._task.cancel()


def spec_for(
    topology: Topology,
    context: Context,
    *,
    durable: str,
    ack_wait_s: float,
    max_deliver: int,
    filter_subjects: tuple[str, ...] | None = None,
) -> ConsumerSpec:
    """A consumer spec over a whole context's stream (or the given filters)."""
    return ConsumerSpec(
        stream=topology.stream_name(context),
        durable=durable,
        filter_subjects=filter_subjects or (topology.context_filter(context),),
        ack_wait_s=ack_wait_s,
        max_deliver=max_deliver,
    )
