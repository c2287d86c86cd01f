"""Idempotent declaration of streams, buckets and consumers at start-up."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError

from libs.config import BusSettings

from .limits import StreamLimits
from .topology import BUCKETS, Context, StreamSpec, Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ConsumerSpec:
    """A durable pull consumer: which stream, which subjects, how patient."""

    stream: str
    durable: str
    filter_subjects: tuple[str, ...]
    ack_wait_s: float
    max_deliver: int
    max_ack_pending: int = 1000


def stream_config(
    spec: StreamSpec, settings: BusSettings, limits: StreamLimits | None = None
) -> StreamConfig:
    """The JetStream configuration for one stream (file storage, dedup window, limits).

    Event streams and the work queue discard *new* messages when full: an append is refused,
    a stored event is never dropped. Dead letters age out (libs/bus/limits.py)."""
    limits = limits or StreamLimits()
    dead_letters = spec.context is Context.DLQ
    return StreamConfig(
        name=spec.name,
        description=spec.description,
        subjects=list(spec.subjects),
        retention=RetentionPolicy.WORK_QUEUE if spec.work_queue else RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=settings.replicas,
        duplicate_window=settings.duplicate_window_s,
        max_msg_size=settings.max_event_bytes,
        discard=DiscardPolicy.OLD if dead_letters else DiscardPolicy.NEW,
        max_bytes=-1 if dead_letters else limits.max_bytes,
        max_msgs=-1 if dead_letters else limits.max_msgs,
        max_age=limits.dlq_max_age_s if dead_letters else 0,
        # Events are immutable history: nobody deletes them through the API.
        deny_delete=not spec.work_queue,
        allow_direct=True,
    )


async def ensure_stream(
    js: JetStreamContext,
    spec: StreamSpec,
    settings: BusSettings,
    limits: StreamLimits | None = None,
) -> None:
    """Create a stream, or bring an existing one to the declared configuration."""
    config = stream_config(spec, settings, limits)
    try:
        await js.stream_info(spec.name)
    except NotFoundError:
        await js.add_stream(config)
        log.info("created stream %s", spec.name)
        return
    try:
        await js.update_stream(config)
    except BadRequestError as exc:
        # Some fields (retention, storage) cannot change in place; keep the stream and say so.
        log.warning("stream %s kept its configuration: %s", spec.name, exc.description)


async def ensure_streams(
    js: JetStreamContext,
    topology: Topology,
    settings: BusSettings,
    limits: StreamLimits | None = None,
) -> None:
    """Declare every stream of the topology (limits: the environment's by default)."""
    limits = limits or StreamLimits.from_env()
    for spec in topology.streams():
        await ensure_stream(js, spec, settings, limits)


async def ensure_buckets(js: JetStreamContext, topology: Topology, settings: BusSettings) -> None:
    """Declare the create-once KV buckets."""
    for purpose in BUCKETS:
        await js.create_key_value(
            KeyValueConfig(
                bucket=topology.bucket(purpose),
                history=1,
                storage=StorageType.FILE,
                replicas=settings.replicas,
            )
        )


async def ensure_consumer(js: JetStreamContext, spec: ConsumerSpec) -> None:
    """Create a durable pull consumer, or update its tunable settings.

    The request names no action, so the broker creates the consumer or updates one that
    exists: its ack wait, redeliveries, pending limit and filter subjects (NATS 2.10+), so a
    service that now asks for other event kinds gets them from its next delivery on, from
    where it left off (tests/component/bus/test_bus.py). A change the broker cannot make in
    place (the deliver policy) is refused: the declaration raises the broker's APIError.
    """
    config = ConsumerConfig(
        name=spec.durable,
        durable_name=spec.durable,
        deliver_policy=DeliverPolicy.ALL,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=spec.ack_wait_s,
        max_deliver=spec.max_deliver,
        max_ack_pending=spec.max_ack_pending,
        filter_subjects=list(spec.filter_subjects),
    )
    await js.add_consumer(spec.stream, config=config)


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
