"""The HTTP client the built-in executors call their systems of record with.

One request goes out and its answer is read whole (the executors never stream), over
aiohttp's connection pool and C-accelerated parser. It replaces httpx's client on this path:
httpx's per-request machinery (URL merging and parsing, header models, the cookie jar each
answer passes through, its auth and redirect layers) cost the worker ~0.5 ms of CPU per call
on top of the wire itself, about as much as everything else a call costs
(docs/journal/2026-12-06-executors-own-http-client.md).

Failures are raised as httpx's exception types, a taxonomy the executors already classify
by (`classify_exception`): waiting for a connection or connecting too long is
`ConnectTimeout`, a refused connection `ConnectError`, silence after the request left
`ReadTimeout`, a connection broken mid-exchange `ReadError`. Whether the request may have
reached the system of record is what tells them apart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import aiohttp
import httpx
import msgspec
from yarl import URL

from .executor import AttemptResult

# Below uvicorn's default keep-alive (5 s), so an idle connection is dropped here before the
# server closes it under a request being sent.
_KEEPALIVE_S = 4.0


class StatusError(httpx.HTTPError):
    """An answer `raise_for_status` refused (4xx or 5xx)."""


class ResponseTooLarge(httpx.HTTPError):
    """An answer longer than the request's `max_bytes`: it was not read further."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the answer is larger than {max_bytes} bytes")
        self.max_bytes = max_bytes


class Answer:
    """A system of record's answer, read whole."""

    __slots__ = ("content", "headers", "reason", "status_code")

    def __init__(
        self, status_code: int, headers: Mapping[str, str], content: bytes, reason: str = ""
    ) -> None:
        self.status_code = status_code
        # Case-insensitive, as HTTP header names are.
        self.headers = headers
        self.content = content
        self.reason = reason

    def json(self) -> Any:
        """The body as JSON; ValueError (msgspec's DecodeError) when it is not."""
        return msgspec.json.decode(self.content)

    @property
    def text(self) -> str:
        """The body as text (undecodable bytes replaced)."""
        return self.content.decode("utf-8", errors="replace")

    def raise_for_status(self) -> None:
        """Raise `StatusError` for a 4xx or 5xx answer."""
        if self.status_code >= 400:
            raise StatusError(f"HTTP {self.status_code} {self.reason}".strip())


class HttpClient(Protocol):
    """What the executors need of an HTTP client: one request, its answer whole."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        timeout_s: float,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Answer:
        """Send one request (a relative `url` joins the client's base URL) and read the
        answer whole; a non-2xx answer is returned, a failure raised as httpx's, and an
        answer over `max_bytes` is `ResponseTooLarge`."""
        ...

    async def aclose(self) -> None:
        """Close the pooled connections (a later request opens new ones)."""
        ...


class AiohttpClient:
    """`HttpClient` over one aiohttp session, opened on the first request (it needs the loop)."""

    def __init__(
        self,
        base_url: str = "",
        *,
        limit: int = 200,
        keepalive_s: float = _KEEPALIVE_S,
        context: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self._base = base_url.rstrip("/")
        self._limit = limit
        self._keepalive_s = keepalive_s
        # Headers every request carries, asked for at its sending (the trace context).
        self._context = context
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._limit, keepalive_timeout=self._keepalive_s
                ),
                # Systems of record answer APIs, not browsers: no cookies kept between calls.
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(),
            )
        return self._session

    def _url(self, url: str) -> URL:
        if url.startswith(("http://", "https://")):
            return URL(url)
        return URL(f"{self._base}/{url.lstrip('/')}")

    async def request(
        self,
        method: str,
        url: str,
        *,
        timeout_s: float,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        max_bytes: int | None = None,
    ) -> Answer:
        """Send one request and read its answer whole (at most `max_bytes`); failures
        raised as httpx's."""
        session = self._open()
        body: bytes | None = None
        sent = dict(headers or {})
        if json is not None:
            body = msgspec.json.encode(json)
            if not any(name.lower() == "content-type" for name in sent):
                sent["Content-Type"] = "application/json"
        if self._context is not None:
            sent.update(self._context())
        try:
            async with session.request(
                method,
                self._url(url),
                params=params,
                headers=sent,
                data=body,
                allow_redirects=False,
                timeout=_timeout(timeout_s),
            ) as answer:
                content = await (answer.read() if max_bytes is None else _read(answer, max_bytes))
                return Answer(answer.status, answer.headers, content, answer.reason or "")
        except aiohttp.ConnectionTimeoutError as exc:
            # Before TimeoutError: aiohttp's connect timeout is a TimeoutError too.
            raise httpx.ConnectTimeout(str(exc) or "connect timed out") from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc)) from exc
        except (aiohttp.InvalidURL, aiohttp.NonHttpUrlClientError, ValueError) as exc:
            # A URL or header value refused before anything was sent (yarl and aiohttp raise
            # ValueError for those): an error the executors classify, not a crash.
            raise httpx.UnsupportedProtocol(str(exc)) from exc
        except TimeoutError as exc:
            # aiohttp's ServerTimeoutError and SocketTimeoutError (sock_read) included.
            raise httpx.ReadTimeout(str(exc) or "read timed out") from exc
        except (aiohttp.ClientError, OSError) as exc:
            # Disconnected, reset or a broken body mid-exchange: the request may have landed.
            raise httpx.ReadError(str(exc) or type(exc).__name__) from exc

    async def aclose(self) -> None:
        """Close the session and its pooled connections (a later request opens a new one)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()


async def _read(answer: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The body, refused as soon as it is known to exceed `max_bytes` (declared or read)."""
    if answer.content_length is not None and answer.content_length > max_bytes:
        raise ResponseTooLarge(max_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in answer.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > max_bytes:
            raise ResponseTooLarge(max_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    """One bound for each phase: waiting for a pooled connection and opening one together
    (aiohttp's `connect`), the connect alone, and the longest silence between two reads once
    the request is written (`sock_read`). The executors' bodies are small JSON, written into
    the socket's buffer at once, so the write has no bound of its own."""
    return aiohttp.ClientTimeout(
        total=None, connect=seconds, sock_connect=seconds, sock_read=seconds
    )


def classify_exception(exc: Exception, elapsed_ms: float) -> AttemptResult:
    """Whether a transport failure happened before the request left, or after."""
    match exc:
        case httpx.ConnectTimeout() | httpx.PoolTimeout():
            return AttemptResult("timeout_before_send", detail=repr(exc), duration_ms=elapsed_ms)
        case httpx.ConnectError():
            return AttemptResult("connect_error", detail=repr(exc), duration_ms=elapsed_ms)
        case httpx.TimeoutException():
            # Read or write timeout: the mutation may have reached the system of record.
            return AttemptResult("timeout_after_send", detail=repr(exc), duration_ms=elapsed_ms)
        case _:
            # The connection broke mid-exchange: same ambiguity as a timeout after send.
            return AttemptResult("timeout_after_send", detail=repr(exc), duration_ms=elapsed_ms)
