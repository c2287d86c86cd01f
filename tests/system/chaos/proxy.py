"""A TCP proxy between one service and the broker that can go slow or cut every connection."""

from __future__ import annotations

import asyncio
import contextlib

from testkit.processes import free_port

_CHUNK = 65536


class TcpProxy:
    """Forwards 127.0.0.1:port to 127.0.0.1:upstream_port, with injectable latency and drops."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        # Added before every forwarded chunk, both directions.
        self.latency_s = 0.0
        self.connections = 0
        self.dropped = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        """The NATS URL a service uses to go through the proxy."""
        return f"nats://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Listen on the proxy port."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def stop(self) -> None:
        """Stop listening and cut everything."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        self.drop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def drop(self) -> int:
        """Cut every open connection (the service sees the broker vanish and reconnects)."""
        pairs = list(self._pairs)
        for client, upstream in pairs:
            client.close()
            upstream.close()
        self._pairs.clear()
        self.dropped += len(pairs)
        return len(pairs)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            # Broker down: refuse like it would.
            writer.close()
            return
        self.connections += 1
        pair = (writer, up_writer)
        self._pairs.add(pair)
        for src, dst in ((reader, up_writer), (up_reader, writer)):
            task = asyncio.create_task(self._pipe(src, dst, pair))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        try:
            while chunk := await src.read(_CHUNK):
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                dst.write(chunk)
                await dst.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            # One side ended: end the other, so the service notices at once.
            self._pairs.discard(pair)
            for side in pair:
                with contextlib.suppress(Exception):
                    side.close()
