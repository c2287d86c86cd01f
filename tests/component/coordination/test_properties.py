"""Hypothesis with real processes: completions, duplicates, channel events and restarts of
either service interleaved at random. Few examples (each restarts real processes); the pure
deciders get hundreds of examples in test_deciders.py.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libs.bus import BUCKETS, Context, Topology, connect, ensure_buckets, ensure_streams, replay
from libs.config import BusSettings
from libs.domain.batch import final_delivery_id
from libs.events import (
    INTERACTION,
    ChannelConnected,
    DeliveryDecided,
    Envelope,
    SpeechStarted,
    SpeechStopped,
)
from testkit.drained import drained
from testkit.processes import Broker
from testkit.surface import eventually

from .harness import Scripted, Services, make_services

Step = tuple[str, int, int]

_STEPS = st.one_of(
    st.tuples(st.just("commit"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.just("duplicate"), st.integers(0, 2), st.integers(0, 2)),
    st.tuples(st.sampled_from(["speak", "quiet"]), st.integers(0, 2), st.just(0)),
    st.tuples(st.just("restart"), st.integers(0, 1), st.just(0)),
)


def _plan() -> st.SearchStrategy[tuple[list[int], list[Step]]]:
    sizes = st.lists(st.integers(1, 3), min_size=3, max_size=3)
    steps = st.lists(_STEPS, min_size=4, max_size=10).filter(
        lambda s: sum(1 for k, _, _ in s if k == "restart") <= 2
    )
    return st.tuples(sizes, steps)


@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    database=None,
)
@given(plan=_plan())
def test_random_interleavings_close_every_batch_exactly_once(
    broker: Broker, plan: tuple[list[int], list[Step]]
) -> None:
    sizes, steps = plan
    prefix = f"h{uuid.uuid4().hex[:10]}"
    logs = Path(tempfile.mkdtemp(prefix="coord-prop-"))
    services = make_services(broker.url, prefix, logs)
    services.start()
    try:
        asyncio.run(_run(broker.url, prefix, services, sizes, steps))
    finally:
        services.stop()


async def _run(
    url: str, prefix: str, services: Services, sizes: list[int], steps: list[Step]
) -> None:
    settings_ = BusSettings(nats_url=url, prefix=prefix)
    topology = Topology(prefix)
    nc = await connect(settings_, name="prop")
    js = nc.jetstream()
    try:
        await ensure_streams(js, topology, settings_)
        await ensure_buckets(js, topology, settings_)
        scripted = Scripted(js=js, topology=topology)
        sessions = [f"s{i}" for i in range(len(sizes))]
        batches = [f"b{i}" for i in range(len(sizes))]
        members = [[f"op{i}m{j}" for j in range(n)] for i, n in enumerate(sizes)]
        for session, batch, ops in zip(sessions, batches, members, strict=True):
            await scripted.open_session(session)
            await scripted.interaction(session, ChannelConnected(channel="voice",
                                                                 connection_id="c"))
            await scripted.open_batch(session, batch, {op: {} for op in ops})
        for kind, i, j in steps:
            session, batch, ops = sessions[i], batches[i], members[i]
            if kind in ("commit", "duplicate"):
                await scripted.commit(session, batch, ops[j % len(ops)])
            elif kind == "speak":
                await scripted.interaction(session, SpeechStarted(stream_ms=0))
            elif kind == "quiet":
                await scripted.interaction(session, SpeechStopped(stream_ms=0))
            else:
                target = services.coordinator if i == 0 else services.policy
                target.kill9()
                target.start()
            await asyncio.sleep(0.05)
        # Let every operation finish and every user fall quiet: everything must close.
        for session, batch, ops in zip(sessions, batches, members, strict=True):
            for op in ops:
                await scripted.commit(session, batch, op)
            await scripted.interaction(session, SpeechStopped(stream_ms=0))
        for session, batch in zip(sessions, batches, strict=True):
            await _said(scripted, session, batch)
        # Every message handled and acknowledged, a killed service's redeliveries included:
        # a second closing from any of them would be on the streams now.
        await drained(js, topology)
        for session, batch in zip(sessions, batches, strict=True):
            finals = [e for e in await scripted.finals(session) if e.batch_id == batch]
            assert len(finals) == 1
            await _nothing_said_over_the_user(scripted, session)
    finally:
        for spec in topology.streams():
            await js.delete_stream(spec.name)
        for purpose in BUCKETS:
            await js.delete_key_value(topology.bucket(purpose))
        await nc.close()


async def _said(scripted: Scripted, session: str, batch: str) -> None:
    delivery = final_delivery_id(batch)

    async def probe() -> bool:
        return any(d in ("deliver_now", "interrupt")
                   for d, _ in await scripted.decisions(session, delivery))

    await eventually(probe, timeout_s=15)


async def _nothing_said_over_the_user(scripted: Scripted, session: str) -> None:
    got = await replay(scripted.js, scripted.topology.stream_name(Context.INTERACTION),
                       scripted.topology.session_subject(session), INTERACTION)
    speaking: list[tuple[Any, Any]] = []
    start = None
    for item in got.items:
        event = item.envelope.event
        if isinstance(event, SpeechStarted) and start is None:
            start = item.envelope.occurred_at
        elif isinstance(event, SpeechStopped) and start is not None:
            speaking.append((start, item.envelope.occurred_at))
            start = None
    if start is not None:
        speaking.append((start, None))
    # The policy sees a channel event a few milliseconds after it is written.
    margin = timedelta(milliseconds=150)
    decided: list[Envelope[Any]] = [
        e for e in await scripted.delivery_events(session)
        if isinstance(e.event, DeliveryDecided) and e.event.decision == "deliver_now"
    ]
    for env in decided:
        at = env.occurred_at
        for began, ended in speaking:
            assert not (began + margin < at and (ended is None or at < ended)), (
                f"deliver_now at {at} while the user spoke from {began} to {ended}"
            )
