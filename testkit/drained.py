"""Waiting until the services have handled everything on the streams, instead of sleeping.

An absence ("no second closing", "the policy wrote nothing after the spoken mark") is only
proven once the services have seen what could have caused it. Each service acknowledges a
message after it has appended what the message leads to, so once every durable consumer of
a prefix has no message left to deliver and none awaiting its ack, and no stream grew
meanwhile, every message has been handled, nothing can still be redelivered, and what the
streams hold is what the bus traffic led to. Timers and HTTP callbacks are not covered:
callers that must outlast those still keep a named quiet window.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from nats.js import JetStreamContext
from nats.js.api import AckPolicy

from libs.bus import Topology, connect
from libs.config import BusSettings
from testkit.surface import SurfaceStack


async def _last_seqs(js: JetStreamContext, streams: list[str]) -> list[int]:
    return [int((await js.stream_info(name)).state.last_seq) for name in streams]


async def _busy(
    js: JetStreamContext, streams: list[str], only: Callable[[str], bool]
) -> tuple[int, list[str]]:
    """How many work consumers there are, and those with work left."""
    seen, busy = 0, []
    for name in streams:
        for info in await js.consumers_info(name):
            # The services' work consumers; the views' and replays' read-only consumers
            # acknowledge nothing and are left out.
            if not info.config.durable_name or info.config.ack_policy != AckPolicy.EXPLICIT:
                continue
            if not only(info.config.durable_name):
                continue
            seen += 1
            if info.num_pending or info.num_ack_pending:
                busy.append(
                    f"{name}/{info.name}: {info.num_pending} pending, "
                    f"{info.num_ack_pending} unacknowledged"
                )
    return seen, busy


async def drained(
    js: JetStreamContext,
    topology: Topology,
    *,
    timeout_s: float = 20.0,
    only: Callable[[str], bool] = lambda durable: True,
) -> None:
    """Until every work consumer of the topology has handled and acknowledged everything.

    `only` picks the consumers by durable name: those of a service that is down on purpose
    keep their backlog, and the others must still drain.
    """
    streams = [spec.name for spec in topology.streams()]
    deadline = time.monotonic() + timeout_s
    busy: list[str] = []
    while time.monotonic() < deadline:
        before = await _last_seqs(js, streams)
        seen, busy = await _busy(js, streams, only)
        # Nothing to wait for would prove nothing: the services' consumers must be there.
        assert seen, f"no work consumer on {streams}"
        # A handler may append to a stream already looked at: only a pass during which no
        # stream grew shows a settled bus.
        if not busy and await _last_seqs(js, streams) == before:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the services did not drain the streams in {timeout_s}s: {busy}")


async def settled(
    stack: SurfaceStack, *, only: Callable[[str], bool] = lambda durable: True
) -> None:
    """`drained` on the streams of a running stack."""
    nc = await connect(BusSettings(nats_url=stack.nats_url, prefix=stack.prefix), name="drained")
    try:
        await drained(nc.jetstream(), Topology(stack.prefix), only=only)
    finally:
        await nc.close()
