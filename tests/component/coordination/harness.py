"""A scripted channel and surface for coordination tests, plus the two real services.

The tests play the interaction surface: they append interaction and operation events as
admission and the operation-worker would, and execute the policy's decisions by appending
`delivery.sent` / `delivery.spoken` / `delivery.unheard` as the surface would.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nats.js import JetStreamContext

from libs.bus import Context, Topology, last_subject_seq, replay
from libs.domain import delivery as delivery_domain
from libs.domain.batch import final_delivery_id
from libs.domain.delivery import DeliveryState
from libs.events import (
    BATCHES,
    DELIVERIES,
    INTERACTION,
    OPERATIONS,
    BatchDrained,
    BatchEvent,
    BatchOpened,
    DeliveryDecided,
    DeliveryDelivered,
    DeliveryEvent,
    DeliveryReady,
    DeliverySent,
    DeliverySpoken,
    Envelope,
    InteractionEvent,
    OperationAdmitted,
    OperationCommitted,
    OperationEvent,
    OperationFailedFinal,
    SessionOpened,
)
from testkit.processes import ServiceProcess, free_port
from testkit.writer import append

_IDS = itertools.count(1)

FAST_ENV = {
    "HOLDLINE_ACK_WAIT_S": "2",
    "HOLDLINE_MAX_DELIVER": "5",
    "HOLDLINE_REDELIVERY_BACKOFF_S": "0.05",
    "HOLDLINE_MIN_QUIET_MS": "300",
    "HOLDLINE_DELIVERY_WINDOW_MS": "20000",
    "HOLDLINE_GRACEFUL_SHUTDOWN_S": "1",
    "HOLDLINE_LOG_LEVEL": "INFO",
}


def now() -> datetime:
    """Wall-clock time, as the services stamp their events."""
    return datetime.now(UTC)


def new_id(kind: str) -> str:
    """A fresh id for a test entity."""
    return f"{kind}{next(_IDS)}x{time.monotonic_ns() % 100000}"


@dataclass
class Services:
    """The two coordination services of one test, on their own ports."""

    coordinator: ServiceProcess
    policy: ServiceProcess

    def start(self) -> None:
        """Start both, then wait until both are ready."""
        self.coordinator.start(wait_ready=False)
        self.policy.start(wait_ready=False)
        self.coordinator.wait_ready()
        self.policy.wait_ready()

    def stop(self) -> None:
        """Kill both: graceful shutdown is not what these tests check, and it takes seconds."""
        self.coordinator.kill9()
        self.policy.kill9()


def make_services(broker_url: str, prefix: str, logs: Path, **env: str) -> Services:
    """Service processes pointed at the test's broker and prefix, with short timings."""
    base = {**FAST_ENV, "NATS_URL": broker_url, "HOLDLINE_PREFIX": prefix, **env}
    c_port, p_port = free_port(), free_port()
    return Services(
        coordinator=ServiceProcess(
            "batch_coordinator",
            {**base, "BATCH_COORDINATOR_PORT": str(c_port)},
            c_port,
            logs / "batch_coordinator.log",
        ),
        policy=ServiceProcess(
            "delivery_policy",
            {**base, "DELIVERY_POLICY_PORT": str(p_port)},
            p_port,
            logs / "delivery_policy.log",
        ),
    )


@dataclass
class Scripted:
    """Appends what admission, the worker and the surface would, and reads the streams back."""

    js: JetStreamContext
    topology: Topology
    user_id: str = "u1"
    tenant_id: str = "t1"
    agent: str = "concierge"
    turns: dict[str, str] = field(default_factory=dict)

    # ------------------------------------------------------------------ writing

    def _env(self, session: str, event: Any, **ids: Any) -> Envelope[Any]:
        return Envelope(
            event_id=ids.pop("event_id", None) or new_id("ev"),
            occurred_at=now(),
            session_id=session,
            event=event,
            **ids,
        )

    async def interaction(self, session: str, event: InteractionEvent, **ids: Any) -> Envelope[Any]:
        """Append an interaction event on the session subject."""
        env = self._env(session, event, **ids)
        await append(self.js, INTERACTION, self.topology.session_subject(session), env)
        return env

    async def open_session(self, session: str, *, agent: str | None = None) -> None:
        """session.opened for the scripted user."""
        await self.interaction(
            session,
            SessionOpened(
                user_id=self.user_id, tenant_id=self.tenant_id, agent=agent or self.agent,
                token_hash="h",
            ),
        )

    async def operation(
        self, session: str, op: str, event: OperationEvent, **ids: Any
    ) -> Envelope[Any]:
        """Append an operation event on the operation subject."""
        env = self._env(session, event, operation_id=op, **ids)
        await append(self.js, OPERATIONS, self.topology.operation_subject(session, op), env)
        return env

    async def open_batch(
        self,
        session: str,
        batch: str,
        ops: dict[str, dict[str, Any]],
        *,
        turn: str | None = None,
        agent: str | None = None,
        tool: str = "provision_access",
        silent: tuple[str, ...] = (),
        words: bool = True,
    ) -> None:
        """batch.opened first, then operation.admitted per member (the admission contract).

        `ops` maps operation id to admission options: arguments, subject_key, owner, priority.
        `silent` members are in the batch but never admitted (their turn died in between).
        `words=False` opens the batch as earlier versions did: ids and tools only.
        """
        turn = turn or new_id("turn")
        agent = agent or self.agent
        members = (*ops, *silent)
        tools = tuple(ops[op].get("tool", tool) if op in ops else tool for op in members)
        arguments = tuple(ops[op].get("arguments", {"access": op}) if op in ops else {}
                          for op in members)
        priorities = tuple(ops[op].get("priority", "normal") if op in ops else "normal"
                           for op in members)
        event = BatchOpened(
            operation_ids=members,
            tools=tools,
            arguments=arguments if words else (),
            priorities=priorities if words else (),
        )
        opened = self._env(session, event, batch_id=batch, turn_id=turn, agent=agent)
        await append(self.js, BATCHES, self.topology.batch_subject(session, batch), opened)
        for op, options in ops.items():
            await self.operation(
                session,
                op,
                OperationAdmitted(
                    tool=options.get("tool", tool),
                    arguments=options.get("arguments", {"access": op}),
                    tenant_id=self.tenant_id,
                    user_id=options.get("user_id", self.user_id),
                    owner=options.get("owner", "session"),
                    priority=options.get("priority", "normal"),
                ),
                batch_id=batch,
                turn_id=turn,
                agent=agent,
                intent_key=f"ik-{op}",
                subject_key=options.get("subject_key"),
            )

    async def commit(self, session: str, batch: str, op: str, **ids: Any) -> Envelope[Any]:
        """operation.committed, as the worker writes it after the provider confirmed."""
        return await self.operation(
            session, op, OperationCommitted(result={"ok": True}), batch_id=batch, **ids
        )

    async def fail(self, session: str, batch: str, op: str, reason: str = "server_error",
                   detail: str = "provider kept failing") -> Envelope[Any]:
        """operation.failed_final."""
        return await self.operation(
            session, op, OperationFailedFinal(reason=reason, detail=detail), batch_id=batch
        )

    async def surface(self, session: str, delivery: str, event: DeliveryEvent) -> None:
        """What the interaction surface writes when it executes a decision."""
        subject = self.topology.delivery_subject(session, delivery)
        stream = self.topology.stream_name(Context.DELIVERIES)
        seq = await last_subject_seq(self.js, stream, subject)
        env = self._env(session, event, delivery_id=delivery)
        await append(self.js, DELIVERIES, subject, env, expected_last_subject_seq=seq)

    async def say(self, session: str, delivery: str, *, channel: str = "voice") -> None:
        """Send and confirm: spoken for voice (mark came back), delivered for chat."""
        state = await self.delivery(session, delivery)
        mode = state.mode if state is not None and state.mode else "proactive"
        await self.surface(session, delivery, DeliverySent(mode=mode, channel=channel))  # type: ignore[arg-type]
        if channel == "voice":
            await self.surface(session, delivery, DeliverySpoken())
        else:
            await self.surface(session, delivery, DeliveryDelivered())

    # ------------------------------------------------------------------ reading

    async def delivery_events(self, session: str) -> list[Envelope[DeliveryEvent]]:
        """Every delivery event of the session, in stream order."""
        got = await replay(
            self.js, self.topology.stream_name(Context.DELIVERIES),
            self.topology.session_filter(Context.DELIVERIES, session), DELIVERIES,
        )
        return [item.envelope for item in got.items]

    async def operation_events(self, session: str, op: str) -> list[Envelope[OperationEvent]]:
        """Every event of one operation, in stream order."""
        got = await replay(
            self.js, self.topology.stream_name(Context.OPERATIONS),
            self.topology.operation_subject(session, op), OPERATIONS,
        )
        return [item.envelope for item in got.items]

    async def batch_events(self, session: str) -> list[Envelope[BatchEvent]]:
        """Every batch event of the session, in stream order."""
        got = await replay(
            self.js, self.topology.stream_name(Context.BATCHES),
            self.topology.session_filter(Context.BATCHES, session), BATCHES,
        )
        return [item.envelope for item in got.items]

    async def deliveries(self, session: str) -> dict[str, DeliveryState]:
        """The session's deliveries, folded from the stream."""
        states: dict[str, DeliveryState] = {}
        for env in await self.delivery_events(session):
            key = env.delivery_id or ""
            try:
                states[key] = delivery_domain.evolve(states.get(key), env)
            except delivery_domain.IllegalDeliveryTransition as exc:
                # The real services wrote it: an illegal transition on the stream is a bug
                # the test must report, not skip.
                raise AssertionError(f"illegal delivery transition on the stream: {exc}") from exc
        return states

    async def delivery(self, session: str, delivery: str) -> DeliveryState | None:
        """One delivery, folded from the stream."""
        return (await self.deliveries(session)).get(delivery)

    async def finals(self, session: str) -> list[Envelope[DeliveryEvent]]:
        """Every final delivery.ready of the session."""
        return [
            e for e in await self.delivery_events(session)
            if isinstance(e.event, DeliveryReady) and e.event.kind == "final"
        ]

    async def decisions(self, session: str, delivery: str) -> list[tuple[str, str]]:
        """(decision, reason) of each delivery.decided, in order."""
        return [
            (e.event.decision, e.event.reason)
            for e in await self.delivery_events(session)
            if e.delivery_id == delivery and isinstance(e.event, DeliveryDecided)
        ]


async def assert_one_final(scripted: Scripted, session: str, batch: str) -> Envelope[Any]:
    """Exactly one final delivery.ready for the batch, in causal order with the batch events.

    Order: delivery.ready (caused by a terminal operation event), then batch.drained naming
    it (caused by the ready event) and every member once. Returns the ready envelope.
    """
    finals = [e for e in await scripted.finals(session) if e.batch_id == batch]
    assert len(finals) == 1, f"expected one final for {batch}, got {len(finals)}"
    ready = finals[0]
    assert ready.delivery_id == final_delivery_id(batch)
    events = [e for e in await scripted.batch_events(session) if e.batch_id == batch]
    opened = events[0].event
    assert isinstance(opened, BatchOpened)
    drained = [e for e in events if isinstance(e.event, BatchDrained)]
    assert len(drained) == 1
    assert [type(e.event) for e in events] == [BatchOpened, BatchDrained]
    settled = [m.operation_id for m in drained[0].event.settled]  # type: ignore[union-attr]
    assert sorted(settled) == sorted(opened.operation_ids), "each member settled exactly once"
    assert events[-1] is drained[0], "batch.drained is the batch's last event"
    assert drained[0].event.final_delivery_id == ready.delivery_id  # type: ignore[union-attr]
    assert drained[0].causation_id == ready.event_id
    assert drained[0].occurred_at >= ready.occurred_at
    return ready
