"""Which surface process holds each live call: a key per call in the `hl_calls` KV bucket.

Several surface processes share the streams; a call lives in exactly one of them. Its
owner is refreshed while the call lasts in a bucket whose entries expire, so a process
killed mid-call stops owning its calls within one TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

log = logging.getLogger(__name__)


class CallOwnership:
    """Which surface process holds each live call: `<connection id>` → owner, in a KV
    bucket whose entries expire after `ttl_s` unless the owner refreshes them.

    Built at the composition root and handed to every part that asks; the bucket needs the
    broker, so it is opened at start-up (`open`). Until then nothing is claimed and nobody
    can be asked (`ready` is False): one process, every call its own.
    """

    def __init__(self, owner: str, ttl_s: float) -> None:
        self.owner = owner
        self.ttl_s = ttl_s
        self._kv: KeyValue | None = None
        self._held: set[str] = set()
        self._beat: asyncio.Task[None] | None = None

    def open(self, kv: KeyValue) -> None:
        """The bucket is declared: claims and lookups go to it from now on."""
        self._kv = kv

    @property
    def ready(self) -> bool:
        """Whether the bucket is open (before start-up, calls are taken to be alive)."""
        return self._kv is not None

    @property
    def kv(self) -> KeyValue:
        """The bucket; only valid once open."""
        if self._kv is None:
            raise RuntimeError("call ownership is not open yet")
        return self._kv

    async def claim(self, connection_id: str) -> None:
        """This process carries the call (the latest attachment of a call id wins)."""
        if self._kv is None:
            return
        self._held.add(connection_id)
        await self.kv.put(connection_id, self.owner.encode())
        if self._beat is None or self._beat.done():
            self._beat = asyncio.create_task(self._heartbeat())

    async def release(self, connection_id: str) -> None:
        """The call ended here."""
        self._held.discard(connection_id)
        if self._kv is None:
            return
        with contextlib.suppress(Exception):
            entry = await self.kv.get(connection_id)
            if entry.value == self.owner.encode():
                await self.kv.delete(connection_id)

    async def owner_of(self, connection_id: str) -> str | None:
        """The live owner of a call, or None when nobody refreshes it any more."""
        try:
            entry = await self.kv.get(connection_id)
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def _heartbeat(self) -> None:
        while self._held:
            await asyncio.sleep(self.ttl_s / 3)
            for connection_id in list(self._held):
                try:
                    await self.kv.put(connection_id, self.owner.encode())
                except Exception:
                    log.exception("call %s: ownership not refreshed", connection_id)

    async def close(self) -> None:
        """Stop refreshing (the keys then expire)."""
        if self._beat is not None:
            self._beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beat
