"""An httpx transport that sends through aiohttp, for the worker's calls to systems of record.

httpx stays the API every executor codes against (requests, responses, `httpx.HTTPError`);
only the wire moves to aiohttp, whose C-accelerated HTTP parser and connection pool cost the
worker much less CPU per call than httpcore. aiohttp's failures are raised as the httpx
errors httpcore would have raised, so the executors' classification of a failed attempt
(before or after the request left) is unchanged.

Bodies are read whole before the response is handed back (the connection goes straight back
to the pool): the executors read every answer whole anyway and never stream.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
from yarl import URL

# Below uvicorn's default keep-alive (5 s), so an idle connection is dropped here before the
# server closes it under a request we are sending.
_KEEPALIVE_S = 4.0

# aiohttp adds these unless told not to; the request httpx built already says what it sends
# (an `application/octet-stream` of aiohttp's own would change what the server reads).
_NOT_ADDED = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class AiohttpTransport(httpx.AsyncBaseTransport):
    """One aiohttp session per transport, opened on the first request (it needs the loop)."""

    def __init__(self, *, limit: int = 200, keepalive_s: float = _KEEPALIVE_S) -> None:
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._limit, keepalive_timeout=self._keepalive_s
                ),
                # httpx owns cookies, redirects and content decoding (it reads
                # Content-Encoding itself): aiohttp passes the exchange through as it is.
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                skip_auto_headers=_NOT_ADDED,
                timeout=aiohttp.ClientTimeout(),
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send one request and read its answer whole; failures raised as httpx's."""
        session = self._open()
        body: Any
        headers = request.headers.multi_items()
        try:
            body = request.content or None
        except httpx.RequestNotRead:
            # A streamed body: aiohttp sends it chunk by chunk and says so itself (it refuses
            # a Transfer-Encoding header it did not set).
            body = request.stream
            headers = [(k, v) for k, v in headers if k.lower() != "transfer-encoding"]
        try:
            async with session.request(
                request.method,
                # httpx has already percent-encoded the URL; aiohttp must not do it again.
                URL(str(request.url), encoded=True),
                headers=headers,
                data=body,
                allow_redirects=False,
                timeout=_timeout(request.extensions.get("timeout")),
            ) as answer:
                content = await answer.read()
                status, raw, reason = answer.status, answer.raw_headers, answer.reason
        except aiohttp.ConnectionTimeoutError as exc:
            # Before TimeoutError: aiohttp's connect timeout is a TimeoutError too.
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError) as exc:
            raise httpx.UnsupportedProtocol(str(exc), request=request) from exc
        except TimeoutError as exc:
            # aiohttp's ServerTimeoutError and SocketTimeoutError (sock_read) included.
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except (aiohttp.ClientError, OSError) as exc:
            # Disconnected, reset or a broken body mid-exchange: the request may have landed.
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        return httpx.Response(
            status,
            headers=raw,
            stream=httpx.ByteStream(content),
            request=request,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": (reason or "").encode()},
        )

    async def aclose(self) -> None:
        """Close the session and its pooled connections (a later request opens a new one)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


def _timeout(given: Any) -> aiohttp.ClientTimeout:
    """httpx's per-phase timeouts as aiohttp's.

    aiohttp's `connect` spans waiting for a pooled connection and opening one (httpx's
    pool + connect); `sock_connect` is the connect alone; `sock_read` is, like httpx's read,
    the longest silence between two reads (aiohttp starts it once the body is written). aiohttp
    has no write timeout: the executors' bodies are small JSON, written into the socket's
    buffer at once, so `write` is not mapped.
    """
    if not isinstance(given, dict):
        return aiohttp.ClientTimeout()
    connect, read, pool = given.get("connect"), given.get("read"), given.get("pool")
    return aiohttp.ClientTimeout(
        total=None,
        connect=None if pool is None else pool + (connect or 0.0),
        sock_connect=connect,
        sock_read=read,
    )
