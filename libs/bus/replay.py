"""Reading a stream (or one session's slice of it) from the start, in order."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import msgspec
import nats.errors
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import FetchTimeoutError, NotFoundError

from libs.events import Envelope, EventCodec, EventDecodeError

from .answers import A, Answer, decoded
from .client import BusJetStream, lean_context
from .handling import Received
from .position import position
from .store import StaleReplica
from .topology import Context, Topology

B = TypeVar("B")


@dataclass(slots=True)
class Replayed(Generic[B]):
    """Everything a replay read: decoded messages in order, and what could not be decoded."""

    items: list[Received[B]] = field(default_factory=list)
    rejected: list[tuple[int, EventDecodeError]] = field(default_factory=list)
    last_seq: int = 0


async def replay(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    codec: EventCodec[B],
    *,
    batch: int = 512,
    timeout_s: float = 5.0,
) -> Replayed[B]:
    """Read every message matching the filter, up to what the stream held at the start."""
    name = f"replay-{uuid.uuid4().hex[:12]}"
    await js.add_consumer(
        stream,
        config=ConsumerConfig(
            name=name,
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            filter_subject=filter_subject,
            inactive_threshold=30.0,
            mem_storage=True,
        ),
    )
    out: Replayed[B] = Replayed()
    try:
        sub = await js.pull_subscribe_bind(durable=name, stream=stream)
        info = await sub.consumer_info()
        pending = int(info.num_pending or 0)
        while pending > 0:
            try:
                msgs = await sub.fetch(min(pending, batch), timeout=timeout_s)
            except (FetchTimeoutError, nats.errors.TimeoutError, TimeoutError):
                break
            for msg in msgs:
                meta = position(msg.reply)
                out.last_seq = meta.stream_seq
                pending = meta.num_pending
                try:
                    envelope = codec.decode(msg.data)
                except EventDecodeError as exc:
                    out.rejected.append((meta.stream_seq, exc))
                    continue
                out.items.append(
                    Received(
                        envelope=envelope,
                        subject=msg.subject,
                        stream_seq=meta.stream_seq,
                        num_delivered=meta.num_delivered,
                    )
                )
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    finally:
        with contextlib.suppress(Exception):
            await js.delete_consumer(stream, name)
    return out


async def replay_owned(
    js: JetStreamContext,
    topology: Topology,
    context: Context,
    codec: EventCodec[B],
    *,
    owns: Callable[[str], bool],
    apply: Callable[[Envelope[B], int], object],
) -> int:
    """Start-up replay of a context's whole stream into a projection: every event of a
    session this process owns (its partition) goes to `apply(envelope, stream_seq)`, in
    order. Returns how many were applied."""
    replayed = await replay(
        js, topology.stream_name(context), topology.context_filter(context), codec
    )
    applied = 0
    for item in replayed.items:
        if owns(item.envelope.session_id):
            apply(item.envelope, item.stream_seq)
            applied += 1
    return applied


class _StreamState(msgspec.Struct):
    last_seq: int = 0


class _StreamInfo(Answer):
    """The one field of a stream-info answer a barrier reads."""

    state: _StreamState | None = None


class _StoredMessage(msgspec.Struct):
    seq: int = 0


class _MessageGet(Answer):
    """The one field of a message-get answer a sequence check reads."""

    message: _StoredMessage | None = None


_STREAM_INFO = msgspec.json.Decoder(_StreamInfo)
_MESSAGE_GET = msgspec.json.Decoder(_MessageGet)
_REQUEST = msgspec.json.Encoder()


async def _ask(
    js: BusJetStream,
    api: str,
    payload: bytes,
    decoder: msgspec.json.Decoder[A],
    *,
    timeout_s: float,
) -> A:
    """One JetStream API request, its answer decoded lean by `decoder` (answers.py)."""
    msg = await js.api_request(api, payload, timeout_s=timeout_s)
    return decoded(decoder, msg.data)


async def stream_last_seq(js: JetStreamContext, stream: str, *, timeout_s: float) -> int:
    """A stream's last sequence, by one stream-info request of which only that is decoded
    (a read barrier asks this of every stream on every read)."""
    lean = lean_context(js)
    if lean is None:
        plain = await js.stream_info(stream)
        return int(plain.state.last_seq or 0)
    info = await _ask(lean, f"STREAM.INFO.{stream}", b"", _STREAM_INFO, timeout_s=timeout_s)
    return info.state.last_seq if info.state is not None else 0


async def last_subject_seq(js: JetStreamContext, stream: str, subject: str) -> int:
    """Sequence of the last message on a subject (0 when the subject is empty), from the
    stream's leader, of which only the sequence is decoded."""
    lean = lean_context(js)
    try:
        if lean is None:
            # nats-py asks for the subject's last message when given a subject alone.
            found = await js.get_msg(stream, subject=subject)
            return int(found.seq or 0)
        request = _REQUEST.encode({"last_by_subj": subject})
        answer = await _ask(
            lean, f"STREAM.MSG.GET.{stream}", request, _MESSAGE_GET, timeout_s=lean.timeout_s
        )
    except NotFoundError:
        return 0
    return answer.message.seq if answer.message is not None else 0


async def read_subject(
    js: JetStreamContext,
    stream: str,
    subject: str,
    codec: EventCodec[B],
    *,
    batch: int = 256,
    timeout_s: float = 5.0,
    consistent: bool = False,
) -> Replayed[B]:
    """Every message of one subject (wildcards allowed), in order, by batched direct get.

    One request per `batch` messages, served by the stream leader (or any replica with
    `allow_direct`) without creating a consumer: loading an aggregate this way costs one
    round trip instead of a consumer's create, fetch and delete.

    Any replica may answer a direct get, and one that is catching up (just restarted, or
    woken from a pause with requests queued) answers with what it has: an aggregate's
    newest events missing, or none at all. With replicated streams (`consistent`: callers
    pass `BusTimings.consistent_reads`, true when HOLDLINE_STREAM_REPLICAS > 1) the
    leader's last sequence of the subject is asked first (one more round trip) and a shorter
    answer is completed from the leader; `StaleReplica` (a "broker unavailable" error that
    handlers retry) only if even that fails. The check takes one aggregate's `*` wildcard
    (an operation's, a batch's or a delivery's kinds: the leader answers the last of
    them); a `>` replay is read as is.
    """
    if not consistent or ">" in subject:
        return await _read_subject(
            js, stream, subject, codec, batch=batch, timeout_s=timeout_s
        )
    floor = await last_subject_seq(js, stream, subject)
    out = await _read_subject(js, stream, subject, codec, batch=batch, timeout_s=timeout_s)
    # A follower a few writes behind (every write reaches the followers a moment after the
    # leader): the missing tail comes from the leader, one message per request.
    while out.last_seq < floor:
        try:
            msg = await js.get_msg(stream, seq=out.last_seq + 1, subject=subject, next=True)
        except NotFoundError:
            raise StaleReplica from None
        if msg.seq is None or msg.seq <= out.last_seq:
            raise StaleReplica
        _add(out, codec, int(msg.seq), msg.data or b"", msg.subject or subject)
    return out


def _add(out: Replayed[B], codec: EventCodec[B], seq: int, data: bytes, subject: str) -> None:
    """Decode one message into `out` (or record why it does not decode)."""
    out.last_seq = seq
    try:
        envelope = codec.decode(data)
    except EventDecodeError as exc:
        out.rejected.append((seq, exc))
        return
    out.items.append(Received(envelope=envelope, subject=subject, stream_seq=seq, num_delivered=1))


async def _read_subject(
    js: JetStreamContext,
    stream: str,
    subject: str,
    codec: EventCodec[B],
    *,
    batch: int,
    timeout_s: float,
) -> Replayed[B]:
    lean = lean_context(js)
    if lean is None:
        return await _read_subject_plainly(js, stream, subject, codec)
    # nats-py exposes no batched direct get; the request is plain JetStream API.
    nc = lean.bus
    api = lean.api_subject(f"DIRECT.GET.{stream}")
    out: Replayed[B] = Replayed()
    start = 1
    while True:
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        pending = 0
        try:
            request = {"seq": start, "next_by_subj": subject, "batch": batch}
            await nc.publish(api, json.dumps(request).encode(), reply=inbox)
            while True:
                msg = await sub.next_msg(timeout=timeout_s)
                headers = msg.headers or {}
                status = headers.get("Status")
                if status == "404":
                    return out
                if status == "204":
                    break
                if status:
                    raise RuntimeError(f"direct get on {stream} failed: {status} {headers}")
                seq = int(headers["Nats-Sequence"])
                pending = int(headers.get("Nats-Num-Pending", "0"))
                _add(out, codec, seq, msg.data, headers.get("Nats-Subject", subject))
        finally:
            await sub.unsubscribe()
        if pending == 0:
            return out
        start = out.last_seq + 1


async def _read_subject_plainly(
    js: JetStreamContext, stream: str, subject: str, codec: EventCodec[B]
) -> Replayed[B]:
    """`_read_subject` through nats-py's public API: one message-get request per message
    (the "plain" bus mode; slower, never reads nats-py's private fields)."""
    out: Replayed[B] = Replayed()
    while True:
        try:
            msg = await js.get_msg(stream, seq=out.last_seq + 1, subject=subject, next=True)
        except NotFoundError:
            return out
        if msg.seq is None or msg.seq <= out.last_seq:
            return out
        _add(out, codec, int(msg.seq), msg.data or b"", msg.subject or subject)
