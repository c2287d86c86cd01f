"""Durable pull consumers: explicit ack, heartbeats for long handlers, bounded redelivery, DLQ.

Messages of one group (by default, one session) are handled in order; different groups
run concurrently. A handler that keeps failing is retried with growing delays until
`max_deliver`, then its message goes to the dead-letter stream with the reason and is
acknowledged, so it leaves a work-queue stream and never blocks the sessions behind it.

A consumer given a `Partition` handles only the sessions that partition owns and acknowledges
every other message unread: each partition's durable consumer sees the whole stream.

Messages come through one standing pull request (`pull.py`), asked again only when used up
or ended, not two requests per wave as nats-py's `fetch` makes (in the "plain" bus mode,
`HOLDLINE_BUS_CLIENT=plain`, through nats-py's `fetch` itself). Each is taken where the
client's parser reads it: queued behind its group's messages, or given a task that handles
its group's queue in order, so a delivery costs one task at most and no lock.

Recovery is by design, not by timeout: the ack wait is short (2 s, `HOLDLINE_ACK_WAIT_S`)
because a live handler heartbeats (`in_progress`) every third of it, and a consumer silent
for a few seconds checks that the broker still has it (re-declaring and resubscribing after
a broker restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError, NotFoundError

from libs import tracing
from libs.events import EventCodec, EventDecodeError
from libs.metrics import CONSUMER_LAG

from .client import lean_context
from .deadletter import DEAD_LETTER_ENCODER, DeadLetter, given_up
from .declare import ConsumerSpec, ensure_consumer
from .handling import Handler, Poison, Received, patiently, redelivery_delay
from .heartbeat import Heartbeat
from .position import position
from .pull import FetchingPull, Pull, StandingPull
from .topology import Context, Partition, Topology

log = logging.getLogger(__name__)

# A standing pull request lives this many fetch timeouts (1 s by default).
STANDING_PULL_FETCHES = 2.0

B = TypeVar("B")


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
        # How long a handler waits out an unavailable broker (`patiently`), and the silence
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
        self._pull: Pull | None = None
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

    def _standing(self, sub: JetStreamContext.PullSubscription) -> Pull:
        lean = lean_context(self._js)
        if lean is None:
            # "plain" bus mode: nats-py's own fetch, one request per wave.
            return FetchingPull(sub, batch=self._batch, on_message=self._take)
        # The request lives two fetch timeouts; heartbeats say the broker still serves it.
        # Short, because a process that stopped (SIGSTOP, a stalled VM) keeps its request,
        # and what the broker pushes into it waits that long plus the ack wait.
        return StandingPull(
            lean.bus,
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
        lean = lean_context(self._js)
        # A plain fetch asks anew each time (nats-py resubscribes its inbox on a reconnect):
        # only the standing request is lost with a connection.
        return 0 if lean is None else int(lean.bus.stats.get("reconnects", 0))

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
        heartbeat = Heartbeat(msg, self._heartbeat_s)
        try:
            with tracing.handler_span(
                self.spec.durable, msg.subject, msg.headers, envelope.event_id
            ):
                await patiently(
                    self._handler, received, patience_s=self._broker_patience_s,
                    name=self.spec.durable,
                )
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
                    await msg.nak(delay=redelivery_delay(self._backoff_s, meta.num_delivered))
            return
        finally:
            heartbeat.cancel()
        await msg.ack()

    async def _dead_letter(self, msg: Msg, reason: str, error: str) -> None:
        meta = position(msg.reply)
        record = given_up(msg, meta, self.spec.durable, reason, error)
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
