"""A per-operation lease in KV: one live worker at a time touches an operation.

JetStream already keeps a work message with one worker while it heartbeats; the lease
covers the rarer case of two copies of the work for the same operation (a redispatch after
the duplicate window) so that the second copy backs off instead of racing the first.

The lease is short (2 s by default) and heartbeated every half second: a worker killed with
`kill -9` stops renewing, its work message comes back after the (3 s) ack wait, by which
time the lease has expired, and the next worker takes it over (a waiting one wakes right at
the expiry the value names, not a poll later), then reconciles before it sends anything
again. A live worker never loses it to a slow handler: only four renewals failing in a row
would let it lapse.

A worker that brings its operation to a terminal state does not release the lease: it stops
renewing and leaves it to run out. Whoever comes for that operation next finds it terminal
either way (waiting on the held lease, it reloads the operation; taking the expired one, it
loads it) and does nothing, so a delete would be one more KV round trip for nothing. An
operation left unfinished (handed back, raced, an exception) releases its lease at once, and
a running-limit slot is always released, since another operation waits for it. `acquire`
takes a lease whose value names an expiry in the past, by an update on the revision it read.
"""

from __future__ import annotations

import contextlib

from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from libs.clock import Clock


def _epoch(clock: Clock) -> float:
    # Expiries are wall-clock seconds in the value: every worker's clock reads them.
    return clock.now().timestamp()


class Lease:
    """A held lease; renew it while working, release it (or let it run out) when done."""

    def __init__(
        self, kv: KeyValue, key: str, owner: str, ttl_s: float, revision: int, *, clock: Clock
    ) -> None:
        self._kv = kv
        self._clock = clock
        self._key = key
        self._owner = owner
        self._ttl_s = ttl_s
        self._revision = revision

    def _value(self) -> bytes:
        return f"{self._owner}|{_epoch(self._clock) + self._ttl_s:.3f}".encode()

    async def renew(self) -> bool:
        """Extend the lease; False if someone else took it (we were presumed dead)."""
        try:
            self._revision = await self._kv.update(self._key, self._value(), last=self._revision)
        except KeyWrongLastSequenceError:
            # A renewal whose answer was lost (a timeout) still moved the revision: if the
            # key still names us, carry on from the revision it holds now.
            try:
                entry = await self._kv.get(self._key)
            except NotFoundError:
                return False
            holder = (entry.value or b"").decode().partition("|")[0]
            if holder != self._owner or entry.revision is None:
                return False
            try:
                self._revision = await self._kv.update(
                    self._key, self._value(), last=entry.revision
                )
            except KeyWrongLastSequenceError:
                return False
        return True

    async def release(self) -> None:
        """Give the lease up."""
        with contextlib.suppress(Exception):
            await self._kv.delete(self._key, last=self._revision)


async def expires_in(kv: KeyValue, key: str, clock: Clock) -> float | None:
    """Seconds until the current holder's lease runs out (None: no lease, or unreadable)."""
    try:
        entry = await kv.get(key)
    except NotFoundError:
        return None
    expires = (entry.value or b"").decode().partition("|")[2]
    try:
        return float(expires) - _epoch(clock)
    except ValueError:
        return None


async def acquire(
    kv: KeyValue, key: str, owner: str, ttl_s: float, clock: Clock
) -> Lease | None:
    """Take the lease if free, expired or already ours; None while another worker holds it."""
    value = f"{owner}|{_epoch(clock) + ttl_s:.3f}".encode()
    try:
        # Revision 0: the key was never written. Not `kv.create`, which on a written key
        # reads it once more to tell a delete marker from a value: the read below does.
        revision = await kv.update(key, value, last=0)
    except KeyWrongLastSequenceError:
        pass
    else:
        return Lease(kv, key, owner, ttl_s, revision, clock=clock)
    try:
        entry = await kv.get(key)
    except KeyNotFoundError as gone:
        if gone.entry is None or gone.entry.revision is None:
            # Purged since the update: the key is unwritten again.
            return await acquire(kv, key, owner, ttl_s, clock)
        # Released (a delete marker): free, replaced on the marker's revision.
        last = gone.entry.revision
    else:
        holder, _, expires = (entry.value or b"").decode().partition("|")
        if holder != owner and float(expires or 0) > _epoch(clock):
            return None
        # Ours, or expired (left to run out, or its holder is dead): taken over.
        last = entry.revision
    try:
        revision = await kv.update(key, value, last=last)
    except KeyWrongLastSequenceError:
        return None
    return Lease(kv, key, owner, ttl_s, revision, clock=clock)
