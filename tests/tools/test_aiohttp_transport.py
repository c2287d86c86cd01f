"""The aiohttp transport under httpx, against a real HTTP/1.1 server on 127.0.0.1.

The server is a few lines of asyncio so that what crosses the wire is visible to the test:
the connections it accepted and closed, and each request exactly as it arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from harness.processes import free_port
from libs.config import ToolSettings
from libs.tools.aiohttp_transport import AiohttpTransport
from libs.tools.registry import sandbox_client
from libs.tools.sandbox import classify_exception


@dataclass
class Seen:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Server:
    """Answers by path: /echo, /status/<n>, /slow, /gzip, /drop (closes without answering)."""

    port: int = 0
    accepted: int = 0
    closed: int = 0
    requests: list[Seen] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while await self._exchange(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            self.ended.set()
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ")
        headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:-2])}
        body = await _body(reader, headers)
        self.requests.append(Seen(method, target, headers, body))
        path = target.split("?")[0]
        if path == "/drop":
            return False
        if path == "/slow":
            await asyncio.sleep(5)
        status, extra, payload = 200, {"Content-Type": "application/json"}, b""
        if path.startswith("/status/"):
            status = int(path.rsplit("/", 1)[1])
            extra["Retry-After"] = "3"
            payload = json.dumps({"detail": "busy"}).encode()
        elif path == "/gzip":
            extra["Content-Encoding"] = "gzip"
            payload = gzip.compress(json.dumps({"zipped": True}).encode())
        else:
            seen = {"method": method, "target": target, "headers": headers}
            payload = json.dumps({**seen, "body": body.decode()}).encode()
        extra["X-Answered-By"] = "test-server"
        lines = [f"HTTP/1.1 {status} Whatever", f"Content-Length: {len(payload)}"]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
        await writer.drain()
        return True


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding") != "chunked":
        return b""
    chunks = []
    while size := int((await reader.readuntil(b"\r\n")).strip(), 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)
    await reader.readuntil(b"\r\n")
    return b"".join(chunks)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    tasks: set[asyncio.Task[None]] = set()

    def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(state.connection(reader, writer))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    listener = await asyncio.start_server(accept, "127.0.0.1", 0)
    state.port = listener.sockets[0].getsockname()[1]
    yield state
    listener.close()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await listener.wait_closed()


@pytest.fixture
async def client(server: Server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, transport=AiohttpTransport()) as http:
        yield http


async def test_a_get_carries_its_query_and_headers_and_answers_with_the_servers(
    client: httpx.AsyncClient, server: Server
) -> None:
    response = await client.get(
        "/echo", params={"reference": "s 1/op_1", "kind": "access"}, headers={"X-Trace": "t-1"}
    )
    assert response.status_code == 200
    assert response.headers["x-answered-by"] == "test-server"
    assert response.reason_phrase == "Whatever"
    assert response.request.url.path == "/echo"
    seen = response.json()
    assert seen["method"] == "GET"
    # The URL goes out exactly as httpx encoded it.
    assert seen["target"] == "/echo?reference=s+1%2Fop_1&kind=access"
    assert seen["headers"]["x-trace"] == "t-1"
    assert seen["headers"]["host"] == f"127.0.0.1:{server.port}"
    assert "content-length" not in seen["headers"]


async def test_a_json_post_round_trips(client: httpx.AsyncClient, server: Server) -> None:
    sent = {"tenant_id": "t1", "amount_cents": 1500, "note": "été"}
    response = await client.post("/echo", json=sent, headers={"Idempotency-Key": "k-1"})
    assert response.status_code == 200
    seen = response.json()
    assert seen["method"] == "POST"
    assert json.loads(seen["body"]) == sent
    assert seen["headers"]["content-type"] == "application/json"
    assert seen["headers"]["idempotency-key"] == "k-1"
    assert int(seen["headers"]["content-length"]) == len(server.requests[0].body)


async def test_a_streamed_body_goes_out_as_it_is_and_nothing_is_added(
    client: httpx.AsyncClient, server: Server
) -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"one,", b"two,", b"three"):
            yield part

    response = await client.post("/echo", content=parts())
    assert response.status_code == 200
    assert server.requests[0].body == b"one,two,three"
    # No Content-Type of aiohttp's own where httpx sent none.
    assert "content-type" not in server.requests[0].headers


async def test_a_non_2xx_answer_is_returned_not_raised(client: httpx.AsyncClient) -> None:
    response = await client.post("/status/503", json={})
    assert response.status_code == 503
    assert response.headers["retry-after"] == "3"
    assert response.json() == {"detail": "busy"}
    assert response.is_server_error


async def test_an_encoded_answer_is_decoded_once_by_httpx(client: httpx.AsyncClient) -> None:
    response = await client.get("/gzip")
    assert response.headers["content-encoding"] == "gzip"
    assert response.json() == {"zipped": True}


async def test_a_refused_connection_is_a_connect_error() -> None:
    port = free_port()  # nothing listens there
    async with httpx.AsyncClient(transport=AiohttpTransport()) as http:
        with pytest.raises(httpx.ConnectError) as refused:
            await http.get(f"http://127.0.0.1:{port}/echo")
    assert refused.value.request.url.port == port
    assert classify_exception(refused.value, 1.0).outcome == "connect_error"


async def test_a_slow_answer_is_a_read_timeout(client: httpx.AsyncClient) -> None:
    started = asyncio.get_running_loop().time()
    with pytest.raises(httpx.ReadTimeout) as late:
        await client.post("/slow", json={}, timeout=httpx.Timeout(5.0, read=0.3))
    assert asyncio.get_running_loop().time() - started < 3
    assert late.value.request.url.path == "/slow"
    # The request left: the worker must look the effect up before sending again.
    assert classify_exception(late.value, 1.0).outcome == "timeout_after_send"


async def test_waiting_for_a_pooled_connection_too_long_is_a_connect_timeout(
    server: Server,
) -> None:
    async with httpx.AsyncClient(base_url=server.url, transport=AiohttpTransport(limit=1)) as http:
        holder = asyncio.create_task(http.get("/slow"))
        while not server.requests:
            await asyncio.sleep(0.01)
        with pytest.raises(httpx.ConnectTimeout) as waited:
            # aiohttp bounds the wait and the connect together: pool + connect.
            await http.get("/echo", timeout=httpx.Timeout(5.0, pool=0.2, connect=0.2))
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
    assert classify_exception(waited.value, 1.0).outcome == "timeout_before_send"


async def test_a_server_closing_without_an_answer_is_a_read_error(
    client: httpx.AsyncClient,
) -> None:
    with pytest.raises(httpx.ReadError) as dropped:
        await client.post("/drop", json={"x": 1})
    assert dropped.value.request.method == "POST"
    assert classify_exception(dropped.value, 1.0).outcome == "timeout_after_send"


async def test_requests_in_turn_share_one_kept_alive_connection(
    client: httpx.AsyncClient, server: Server
) -> None:
    for _ in range(3):
        assert (await client.post("/echo", json={})).status_code == 200
    assert (await client.get("/echo")).status_code == 200
    assert server.accepted == 1
    assert server.closed == 0


async def test_aclose_closes_the_pooled_connections(server: Server) -> None:
    transport = AiohttpTransport()
    async with httpx.AsyncClient(base_url=server.url, transport=transport) as http:
        assert (await http.get("/echo")).status_code == 200
        assert server.closed == 0
    # Leaving the client closed the transport, and so the server's end of the connection.
    await asyncio.wait_for(server.ended.wait(), 5)
    assert (server.accepted, server.closed) == (1, 1)
    await transport.aclose()  # closing again is harmless


async def test_the_sandbox_client_sends_through_the_transport(server: Server) -> None:
    client = sandbox_client(ToolSettings(provider_url=server.url))
    async with client:
        transport: Any = client._transport  # the one the client was built with
        assert isinstance(transport, AiohttpTransport)
        response = await client.get("/echo")
    assert response.status_code == 200
    assert response.json()["target"] == "/echo"
