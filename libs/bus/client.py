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
nats-py, 95 to 113 µs with both changes (`docs/journal/2026-12-06-lean-request-path.md`).

A message going out is queued the same way: while the connection is up and its flusher runs,
`publish` builds the PUB or HPUB command in one step and wakes the flusher without awaiting,
and a request waits for its reply on one timer instead of `asyncio.wait_for`. nats-py's own
path is taken whenever that does not hold (connecting, reconnecting, draining, closed, a
pending buffer about to overflow), so buffering and back-pressure are unchanged. The command
is nats-py's wire format with its checks: no whitespace in a subject, header names of token
characters, line breaks in header values sent as spaces.

A subscription can also take its messages where the parser reads them (`deliver_directly`):
the durable consumers' standing pull requests do, so an event reaches its handler's task
without nats-py's per-subscription queue and task and a `wait_for` around each read.

Both read nats-py internals (its request map and reply prefix, the context's timeout and
connection), so the dependency is pinned to the minor version they were checked against
(`pyproject.toml`) and `tests/component/bus/test_bus_client.py` fails if one moves. The bus
asks for this client only in its "lean" mode (`HOLDLINE_BUS_CLIENT`, the default); in
"plain" mode `connect` returns nats-py's own client and every caller takes nats-py's public
API instead (`lean_context` says which: replay.py, pull.py, consumer.py), so the pin can
move with plain mode on while the lean path is checked against the new version.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.errors import NoStreamResponseError
from typing_extensions import override

from .answers import PUB_ACK, decoded

log = logging.getLogger(__name__)

# What nats-py refuses in a subject and in a header name (the wire format's rules).
_NOT_IN_SUBJECT = re.compile(r"[ \t\r\n]")
_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_LINE_BREAKS = str.maketrans({"\r": " ", "\n": " "})


def wire_command(
    subject: str, reply: str, payload: bytes, headers: Mapping[str, str] | None
) -> bytes:
    """The PUB (no headers) or HPUB command carrying one message, as nats-py writes it."""
    if not subject or _NOT_IN_SUBJECT.search(subject) or _NOT_IN_SUBJECT.search(reply):
        raise nats.errors.BadSubjectError
    if headers is None:
        return b"PUB %b %b %d\r\n%b\r\n" % (
            subject.encode(), reply.encode(), len(payload), payload
        )
    lines = [b"NATS/1.0\r\n"]
    for given, value in headers.items():
        name = given.strip()
        if not name:
            continue
        if not _HEADER_NAME.fullmatch(name):
            raise nats.errors.BadHeaderError(name)
        text = value.strip().translate(_LINE_BREAKS)
        lines.append(b"%b: %b\r\n" % (name.encode(), text.encode()))
    lines.append(b"\r\n")
    head = b"".join(lines)
    return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
        subject.encode(), reply.encode(), len(head), len(head) + len(payload), head, payload
    )


def lean_context(js: JetStreamContext) -> BusJetStream | None:
    """The lean context if `js` is one (a "lean" mode connection), else None: the caller
    then keeps to nats-py's public API."""
    return js if isinstance(js, BusJetStream) else None


def _expire(future: asyncio.Future[Msg]) -> None:
    if not future.done():
        future.set_exception(nats.errors.TimeoutError())


class BusJetStream(JetStreamContext):
    """nats-py's JetStream context; a publish's acknowledgement is decoded lean."""

    def __init__(self, conn: BusClient, **opts: Any) -> None:
        super().__init__(conn, **opts)
        # The connection, typed: the lean readers and pulls use its direct paths.
        self.bus = conn

    @property
    def timeout_s(self) -> float:
        """The context's default request timeout."""
        return float(self._timeout)

    def api_subject(self, api: str) -> str:
        """The subject of a JetStream API request (`STREAM.INFO.<stream>`, ...)."""
        return f"{self._prefix}.{api}"

    async def api_request(self, api: str, payload: bytes, *, timeout_s: float) -> Msg:
        """One JetStream API request on the lean request path; its raw answer."""
        return await self.bus.request(self.api_subject(api), payload, timeout=timeout_s)

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
        # The reply prefix as text, and a count naming each lean request's reply.
        self._reply_prefix = ""
        self._requests = 0

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
        self._reply_prefix = prefix.decode() if prefix is not None else ""

    def _queued(self, command: bytes, size: int) -> bool:
        """Queue `command` for the flusher and wake it; False (nothing queued) when nats-py's
        own path must take it: not connected, no flusher, or a pending buffer to drain first."""
        flusher = self._flusher_task
        wake = self._flush_queue
        if (
            self._status != Client.CONNECTED
            or flusher is None
            or flusher.done()
            or wake is None
            or size > self._max_payload
            or (0 < self._max_pending_size < self._pending_data_size + len(command))
        ):
            return False
        self._pending.append(command)
        self._pending_data_size += len(command)
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += size
        if wake.empty():
            # The flusher resolves what it takes from the queue; nobody waits on it here.
            wake.put_nowait(asyncio.get_running_loop().create_future())
        return True

    @override
    async def publish(
        self,
        subject: str,
        payload: bytes = b"",
        reply: str = "",
        headers: dict[str, str] | None = None,
    ) -> None:
        if not self._queued(wire_command(subject, reply, payload, headers), len(payload)):
            await super().publish(subject, payload, reply, headers)

    @override
    async def _request_new_style(
        self,
        subject: str,
        payload: bytes,
        timeout: float = 1,
        headers: dict[str, Any] | None = None,
    ) -> Msg:
        if not self._reply_prefix:
            return await super()._request_new_style(subject, payload, timeout, headers)
        self._requests += 1
        # Unique for the connection's life; nats-py's own requests use 26-character ids.
        token = f"q{self._requests:x}"
        command = wire_command(subject, self._reply_prefix + token, payload, headers)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Msg] = loop.create_future()
        self._resp_map[token] = future
        if not self._queued(command, len(payload)):
            del self._resp_map[token]
            return await super()._request_new_style(subject, payload, timeout, headers)
        expiry = loop.call_later(timeout, _expire, future)
        try:
            return await future
        finally:
            expiry.cancel()
            self._resp_map.pop(token, None)

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
