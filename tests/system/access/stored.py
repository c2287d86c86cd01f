"""Reading back what the broker stored: every message of every stream of a prefix."""

from __future__ import annotations

from dataclasses import dataclass

from nats.js.errors import NotFoundError

from libs.bus import Context, Topology, connect
from libs.config import BusSettings


@dataclass(frozen=True, slots=True)
class Stored:
    """One stored message."""

    stream: Context
    seq: int
    subject: str
    data: bytes


async def stored_messages(nats_url: str, prefix: str) -> list[Stored]:
    """Every message still stored in the prefix's streams (purged ones are gone)."""
    topology = Topology(prefix)
    nc = await connect(BusSettings(nats_url=nats_url, prefix=prefix), name="test-reader")
    found: list[Stored] = []
    try:
        js = nc.jetstream()
        for context in Context:
            name = topology.stream_name(context)
            info = await js.stream_info(name)
            first, last = int(info.state.first_seq or 0), int(info.state.last_seq or 0)
            for seq in range(max(first, 1), last + 1):
                try:
                    msg = await js.get_msg(name, seq)
                except NotFoundError:
                    continue
                found.append(Stored(context, seq, msg.subject or "", msg.data or b""))
    finally:
        await nc.close()
    return found
