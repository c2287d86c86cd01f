"""The operator sub-commands: connect with the environment's settings, act, print, exit code."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from libs.bus import EventStore, NatsEventStore, Topology, connect
from libs.bus.connection import without_credentials
from libs.config import BusSettings

from .deadletters import OperatorError, read_letters, redrive
from .rebuild import rebuild
from .resolve import resolve

# Exit statuses: 0 done, 1 the broker or a stream is missing, 2 the request was refused.
REFUSED = 2
UNAVAILABLE = 1
_CONNECT_TIMEOUT_S = 5.0


async def run(args: argparse.Namespace) -> int:
    """Run one operator command against the broker named by NATS_URL / HOLDLINE_PREFIX."""
    try:
        settings = BusSettings.from_env()
    except ValueError as exc:
        print(f"holdline: bad settings: {exc}", file=sys.stderr)
        return UNAVAILABLE
    topology = Topology(settings.prefix)
    action = _ACTIONS[(args.command, getattr(args, "dlq_command", None))]
    try:
        # The shared connect retries forever; a command gives up after a few seconds.
        nc = await asyncio.wait_for(
            connect(settings, name="holdline-operator"), timeout=_CONNECT_TIMEOUT_S
        )
    except Exception as exc:  # noqa: BLE001 - any failure to connect ends the command the same way
        where = ", ".join(without_credentials(url) for url in settings.servers)
        print(f"holdline: cannot reach the broker at {where}: {exc!r}", file=sys.stderr)
        return UNAVAILABLE
    try:
        js = nc.jetstream()
        # Reads of the DLQ and of projections go to JetStream; every write to the store.
        store = NatsEventStore(js, {}, timings=settings.timings)
        return await action(js, store, topology, args)
    except OperatorError as exc:
        print(f"holdline: refused: {exc}", file=sys.stderr)
        return REFUSED
    except NotFoundError as exc:
        print(
            f"holdline: stream not found under prefix {settings.prefix!r}: {exc}", file=sys.stderr
        )
        return UNAVAILABLE
    finally:
        await nc.close()


async def _dlq_list(
    js: JetStreamContext, store: EventStore, topology: Topology, args: argparse.Namespace
) -> int:
    letters = await read_letters(js, topology, args.stream)
    if args.json:
        print(json.dumps([x.as_dict() for x in letters], indent=2))
        return 0
    if not letters:
        print("no dead letters")
    for x in letters:
        r = x.record
        mark = f"  REDRIVEN {x.redriven.redriven_at.isoformat()}" if x.redriven else ""
        print(
            f"#{x.dlq_seq} {x.source} session={x.session_id} operation={x.operation_id or '-'} "
            f"{r.source_stream}:{r.source_seq} {r.source_subject} consumer={r.consumer} "
            f"delivered={r.num_delivered} at={r.dead_lettered_at.isoformat()}{mark}\n"
            f"    reason: {r.reason}\n    error: {r.error[:200]}"
        )
    return 0


async def _dlq_redrive(
    js: JetStreamContext, store: EventStore, topology: Topology, args: argparse.Namespace
) -> int:
    marker = await redrive(js, store, topology, args.dlq_seq, force=args.force)
    print(
        f"redrove dead letter {marker.dlq_seq}: {marker.action} -> {marker.target_subject} "
        f"(msg id {marker.msg_id})"
    )
    return 0


async def _resolve(
    js: JetStreamContext, store: EventStore, topology: Topology, args: argparse.Namespace
) -> int:
    state, seq = await resolve(
        store, topology, args.session_id, args.operation_id, args.outcome, who=args.by,
        why=args.why,
    )
    print(
        f"operation {state.operation_id} resolved as {state.status.value} by {args.by} "
        f"(event at sequence {seq}): {args.why}"
    )
    return 0


async def _rebuild(
    js: JetStreamContext, store: EventStore, topology: Topology, args: argparse.Namespace
) -> int:
    out = await rebuild(js, topology, args.projection, args.session)
    if args.json:
        print(json.dumps(out.as_dict(), indent=2))
        return 0
    scope = f"session {args.session}" if args.session else "all sessions"
    print(
        f"rebuilt {out.projection} for {scope}: {out.total} from {out.events} events "
        f"({out.undecodable} undecodable, {out.refused} refused)"
    )
    for status, count in sorted(out.by_status.items()):
        print(f"  {status}: {count}")
    return 0


Action = Callable[
    [JetStreamContext, EventStore, Topology, argparse.Namespace], Awaitable[int]
]
_ACTIONS: dict[tuple[str, str | None], Action] = {
    ("dlq", "list"): _dlq_list,
    ("dlq", "redrive"): _dlq_redrive,
    ("resolve", None): _resolve,
    ("rebuild", None): _rebuild,
}
