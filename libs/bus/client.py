"""nats-py's client and JetStream context, with the request path made lean.

Every append, KV write and JetStream API read is a request, a dozen or more a chat turn in
each service. nats-py spends more of its CPU on each than the request needs:

- a reply is delivered like any subscription's message: queued for the reply
  subscription's task, which resolves the waiting future on a later turn of the loop. Here a
  reply without headers (an acknowledgement, an API answer: the common case) resolves its
  future where the parser reads it; a reply with headers (a status such as "no responders")
  and every other subscription keep nats-py's own path;
- a publish's acknowledgement goes through `json` and a walk over the dataclass's fields.
  Here it is decoded by msgspec (`answers.py`) into the same `PubAck`, and an error answer
  raises the same exception, so KV writes and appends change nothing but their cost.

Measured alone (sequential JetStream publishes, client CPU): 138 to 157 µs a publish with
nats-py, 95 to 113 µs with both changes (`docs/performance.md`).

A subscription can also take its messages where the parser reads them (`deliver_directly`):
the durable consumers' standing pull requests do, so an event reaches its handler's task
without nats-py's per-subscription queue and task and a `wait_for` around each read.

Both read nats-py internals (its request map and reply prefix, the context's timeout and
connection), so the dependency is pinned to the minor version they were checked against
(`pyproject.toml`) and `tests/foundation/test_bus_client.py` fails if one moves.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NoStreamResponseError
from typing_extensions import override

from .answers import PUB_ACK, decoded

log = logging.getLogger(__name__)


class BusJetStream(JetStreamContext):
    """nats-py's JetStream context; a publish's acknowledgement is decoded lean."""

    @override
    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        timeout: float | None = None,
        stream: str | None = None,
        headers: dict[str, Any] | None = None,
        msg_ttl: float | None = None,
    ) -> api.PubAck:
        """`JetStreamContext.publish`: the same request, answer and exceptions."""
        if stream is not None or msg_ttl is not None:
            # Headers nats-py adds for these; nothing here asks for them.
            return await super().publish(subject, payload, timeout, stream, headers, msg_ttl)
        try:
            msg = await self._nc.request(
                subject, payload, timeout=self._timeout if timeout is None else timeout,
                headers=headers,
            )
        except nats.errors.NoRespondersError:
            raise NoStreamResponseError from None
        ack = decoded(PUB_ACK, msg.data)
        return api.PubAck(stream=ack.stream, seq=ack.seq, duplicate=ack.duplicate)


class BusClient(Client):
    """nats-py's client; a reply to a request reaches its waiter without a task hop."""

    def __init__(self) -> None:
        super().__init__()
        # The reply subscription's id, once nats-py made it for the first request.
        self._reply_sid = 0
        # Subscriptions whose messages go to a callback where the parser reads them.
        self._direct: dict[int, Callable[[Msg], None]] = {}

    def deliver_directly(self, sid: int, on_msg: Callable[[Msg], None]) -> None:
        """Hand subscription `sid`'s messages (statuses included) to `on_msg` as they are
        read, on the reading task: `on_msg` must not block, and schedules any work."""
        self._direct[sid] = on_msg

    def stop_delivering(self, sid: int) -> None:
        """Undo `deliver_directly`; what arrives later for `sid` takes nats-py's path."""
        self._direct.pop(sid, None)

    @override
    def jetstream(self, **opts: Any) -> JetStreamContext:
        """A JetStream context whose publishes decode their acknowledgement lean."""
        return BusJetStream(self, **opts)

    @override
    async def _init_request_sub(self) -> None:
        await super()._init_request_sub()
        prefix = self._resp_sub_prefix
        mux = f"{prefix.decode()}*" if prefix is not None else None
        # Found by its subject: another subscription may have been numbered meanwhile.
        for sid, sub in self._subs.items():
            if sub.subject == mux:
                self._reply_sid = sid

    @override
    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        direct = self._direct.get(sid)
        if direct is not None:
            self.stats["in_msgs"] += 1
            self.stats["in_bytes"] += len(data)
            # nats-py's own header parsing and message, so statuses read the same.
            parsed = await self._process_headers(headers)
            try:
                direct(self._build_message(sid, subject, reply, data, parsed))
            except Exception:
                # Raised into the parser, it would end this connection's reading.
                log.exception("direct delivery on subscription %d failed", sid)
            return
        prefix = self._resp_sub_prefix
        if sid != self._reply_sid or headers or prefix is None:
            await super()._process_msg(sid, subject, reply, data, headers)
            return
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        # The token after the reply prefix names the waiting request (nats-py's own keying).
        future = self._resp_map.get(subject[len(prefix) :].decode())
        if future is not None and not future.done():
            future.set_result(Msg(self, subject.decode(), reply.decode(), data, None, _sid=sid))
