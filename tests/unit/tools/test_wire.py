"""The executors' HTTP client (`libs/tools/wire.py`) against a real HTTP/1.1 server on
127.0.0.1.

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

import httpx
import pytest

from libs.config import ToolSettings
from libs.tools.registry import sandbox_client
from libs.tools.wire import AiohttpClient, StatusError, classify_exception
from testkit.processes import free_port


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
async def client(server: Server) -> AsyncIterator[AiohttpClient]:
    http = AiohttpClient(server.url)
    yield http
    await http.aclose()


async def test_a_get_carries_its_query_and_headers_and_answers_with_the_servers(
    client: AiohttpClient, server: Server
) -> None:
    answer = await client.request(
        "GET",
        "/echo",
        params={"reference": "s 1/op_1", "kind": "access"},
        headers={"X-Trace": "t-1"},
        timeout_s=5,
    )
    assert answer.status_code == 200
    assert answer.headers["x-answered-by"] == "test-server"
    assert answer.reason == "Whatever"
    seen = answer.json()
    assert seen["method"] == "GET"
    # The query is encoded once (a slash needs no escape in a query).
    assert seen["target"] == "/echo?reference=s+1/op_1&kind=access"
    assert seen["headers"]["x-trace"] == "t-1"
    assert seen["headers"]["host"] == f"127.0.0.1:{server.port}"
    assert "content-length" not in seen["headers"]


async def test_a_json_post_round_trips(client: AiohttpClient, server: Server) -> None:
    sent = {"tenant_id": "t1", "amount_cents": 1500, "note": "été"}
    answer = await client.request(
        "POST", "/echo", json=sent, headers={"Idempotency-Key": "k-1"}, timeout_s=5
    )
    assert answer.status_code == 200
    seen = answer.json()
    assert seen["method"] == "POST"
    assert json.loads(seen["body"]) == sent
    assert seen["headers"]["content-type"] == "application/json"
    assert seen["headers"]["idempotency-key"] == "k-1"
    assert int(seen["headers"]["content-length"]) == len(server.requests[0].body)


async def test_every_request_carries_the_context_s_headers_as_they_are_when_it_leaves(
    server: Server,
) -> None:
    trace = {"traceparent": "00-aa-bb-01"}
    http = AiohttpClient(server.url, context=lambda: dict(trace))
    try:
        await http.request("POST", "/echo", json={}, timeout_s=5)
        trace["traceparent"] = "00-cc-dd-01"
        await http.request("GET", "/echo", timeout_s=5)
    finally:
        await http.aclose()
    assert [r.headers["traceparent"] for r in server.requests] == ["00-aa-bb-01", "00-cc-dd-01"]


async def test_a_relative_path_joins_the_base_and_an_absolute_url_goes_where_it_says(
    server: Server,
) -> None:
    elsewhere = AiohttpClient("http://127.0.0.1:1/api/")
    try:
        answer = await elsewhere.request("GET", f"{server.url}/echo", timeout_s=5)
    finally:
        await elsewhere.aclose()
    assert answer.json()["target"] == "/echo"
    based = AiohttpClient(f"{server.url}/api/")
    try:
        answer = await based.request("GET", "/v1/x", timeout_s=5)
    finally:
        await based.aclose()
    assert answer.json()["target"] == "/api/v1/x"


async def test_a_non_2xx_answer_is_returned_not_raised(client: AiohttpClient) -> None:
    answer = await client.request("POST", "/status/503", json={}, timeout_s=5)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "3"
    assert answer.headers["Retry-After"] == "3"
    assert answer.json() == {"detail": "busy"}
    with pytest.raises(StatusError) as refused:
        answer.raise_for_status()
    # Read by the executors as any failed HTTP exchange.
    assert isinstance(refused.value, httpx.HTTPError)
    assert "503" in str(refused.value)


async def test_a_body_that_is_not_json_says_so_as_a_value_error(client: AiohttpClient) -> None:
    answer = await client.request("GET", "/echo", timeout_s=5)
    answer.content = b"<html>busy</html>"
    with pytest.raises(ValueError, match="JSON"):
        answer.json()
    assert answer.text == "<html>busy</html>"


async def test_an_encoded_answer_is_decoded_once(client: AiohttpClient) -> None:
    answer = await client.request("GET", "/gzip", timeout_s=5)
    assert answer.json() == {"zipped": True}


async def test_a_refused_connection_is_a_connect_error() -> None:
    port = free_port()  # nothing listens there
    http = AiohttpClient()
    try:
        with pytest.raises(httpx.ConnectError) as refused:
            await http.request("GET", f"http://127.0.0.1:{port}/echo", timeout_s=5)
    finally:
        await http.aclose()
    assert str(port) in str(refused.value)
    assert classify_exception(refused.value, 1.0).outcome == "connect_error"


async def test_a_slow_answer_is_a_read_timeout(client: AiohttpClient) -> None:
    started = asyncio.get_running_loop().time()
    with pytest.raises(httpx.ReadTimeout) as late:
        await client.request("POST", "/slow", json={}, timeout_s=0.3)
    assert asyncio.get_running_loop().time() - started < 3
    # The request left: the worker must look the effect up before sending again.
    assert classify_exception(late.value, 1.0).outcome == "timeout_after_send"


async def test_waiting_for_a_pooled_connection_too_long_is_a_connect_timeout(
    server: Server,
) -> None:
    http = AiohttpClient(server.url, limit=1)
    try:
        holder = asyncio.create_task(http.request("GET", "/slow", timeout_s=10))
        while not server.requests:
            await asyncio.sleep(0.01)
        with pytest.raises(httpx.ConnectTimeout) as waited:
            # The wait for a pooled connection and the connect share one bound.
            await http.request("GET", "/echo", timeout_s=0.2)
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
    finally:
        await http.aclose()
    assert classify_exception(waited.value, 1.0).outcome == "timeout_before_send"
    assert len(server.requests) == 1


async def test_a_server_closing_without_an_answer_is_a_read_error(
    client: AiohttpClient, server: Server
) -> None:
    with pytest.raises(httpx.ReadError) as dropped:
        await client.request("POST", "/drop", json={"x": 1}, timeout_s=5)
    assert server.requests[0].method == "POST"
    assert classify_exception(dropped.value, 1.0).outcome == "timeout_after_send"


async def test_requests_in_turn_share_one_kept_alive_connection(
    client: AiohttpClient, server: Server
) -> None:
    for _ in range(3):
        assert (await client.request("POST", "/echo", json={}, timeout_s=5)).status_code == 200
    assert (await client.request("GET", "/echo", timeout_s=5)).status_code == 200
    assert server.accepted == 1
    assert server.closed == 0


async def test_aclose_closes_the_pooled_connections(server: Server) -> None:
    http = AiohttpClient(server.url)
    assert (await http.request("GET", "/echo", timeout_s=5)).status_code == 200
    assert server.closed == 0
    await http.aclose()
    await asyncio.wait_for(server.ended.wait(), 5)
    assert (server.accepted, server.closed) == (1, 1)
    await http.aclose()  # closing again is harmless
    # A later request opens a new connection.
    assert (await http.request("GET", "/echo", timeout_s=5)).status_code == 200
    await http.aclose()
    assert server.accepted == 2


async def test_the_sandbox_client_sends_to_the_provider_url(server: Server) -> None:
    http = sandbox_client(ToolSettings(provider_url=server.url))
    try:
        answer = await http.request("GET", "/echo", timeout_s=5)
    finally:
        await http.aclose()
    assert answer.status_code == 200
    assert answer.json()["target"] == "/echo"
