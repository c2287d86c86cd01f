"""Streamed model calls over HTTP that survive a blip, within the turn's time budget.

A request that fails before its answer starts (429, 408, 409, 5xx, or no connection) is
retried a bounded number of times, as the official OpenAI SDK does: after the delay the
server asks for (`retry-after-ms`, else `Retry-After` in seconds or as a date), else an
exponential backoff with jitter; `x-should-retry` overrides the status. Each retry must fit
the budget: when the wait plus a minimal attempt would end after the deadline, the call
gives up at once with the reason, so the user hears an apology early rather than late. An
answer that started streaming is never retried: a cut stream is an error (nothing of it is
used), and another attempt could propose different calls.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from .interface import ModelError

log = logging.getLogger(__name__)

T = TypeVar("T")
_MAX_ERROR_BODY = 2000
# A `data: [DONE]` line: the stream says it is complete (Chat Completions ends this way).
DONE: dict[str, Any] = {"type": "[DONE]"}


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry a model call that failed before its answer."""

    max_retries: int = 2
    initial_delay_s: float = 0.5
    max_delay_s: float = 8.0
    # The least time an attempt needs: a retry that leaves less is not started.
    min_attempt_s: float = 1.0

    def backoff_s(self, retry: int) -> float:
        """The delay before retry number `retry` (0-based) when the server names none."""
        delay = min(self.initial_delay_s * 2.0**retry, self.max_delay_s)
        # Up to 25% shorter, so clients that failed together do not retry together.
        return delay * (1 - 0.25 * random.random())  # noqa: S311 - jitter, not a secret


def retry_after_s(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """The delay the server asks for, in seconds, or None when it names none."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            return value / divisor
    raw = headers.get("retry-after")
    if raw:
        try:
            parsed = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        return max(0.0, parsed.timestamp() - (time.time() if now is None else now))
    return None


def retryable(response: httpx.Response) -> bool:
    """Whether a failed answer is worth another attempt."""
    hint = str(response.headers.get("x-should-retry", ""))
    if hint in ("true", "false"):
        return hint == "true"
    status: int = response.status_code
    return status in (408, 409, 429) or status >= 500


async def sse_events(response: httpx.Response, vendor: str) -> AsyncIterator[dict[str, Any]]:
    """The JSON payloads of a server-sent event stream; `DONE` for a `[DONE]` line."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))
            continue
        if line or not data:
            continue  # `event:`, `id:`, comments, or a blank line with nothing pending
        payload = "\n".join(data)
        data = []
        if payload == "[DONE]":
            yield DONE
            return
        try:
            event = json.loads(payload)
        except json.JSONDecodeError as exc:
            raise ModelError(f"{vendor}: unreadable stream event: {payload[:200]!r}") from exc
        if isinstance(event, dict):
            yield event


async def _error_text(response: httpx.Response) -> str:
    return (await response.aread())[:_MAX_ERROR_BODY].decode("utf-8", "replace")


async def stream_post(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    read: Callable[[httpx.Response], Awaitable[T]],
    *,
    deadline: float,
    policy: RetryPolicy,
    vendor: str,
) -> T:
    """POST `body` and fold the streamed answer with `read`, retrying as the module says.

    `deadline` is a `time.monotonic()` instant: past it the call has failed.
    """
    retry = 0
    budget = deadline - time.monotonic()
    while True:
        started = time.monotonic()
        remaining = deadline - started
        if remaining <= 0:
            raise ModelError(f"{vendor}: no complete answer within the turn's time budget")
        answered = False
        failure: str
        wait: float | None = None
        try:
            async with asyncio.timeout(remaining):
                async with client.stream(
                    "POST", url, json=body, headers={"Accept": "text/event-stream"}
                ) as response:
                    answered = True
                    if response.status_code < 400:
                        return await read(response)
                    failure = f"HTTP {response.status_code}: {await _error_text(response)}"
                    if not retryable(response):
                        raise ModelError(f"{vendor}: {failure}")
                    wait = retry_after_s(response.headers)
        except TimeoutError as exc:
            raise ModelError(f"{vendor}: no complete answer within {budget:.1f} s") from exc
        except httpx.TransportError as exc:
            if answered:
                # The answer had begun: a cut stream is never retried.
                raise ModelError(f"{vendor}: the stream broke: {type(exc).__name__}") from exc
            failure = f"{type(exc).__name__}: {exc}"
        if retry >= policy.max_retries:
            raise ModelError(f"{vendor}: {failure} (after {retry + 1} attempts)")
        delay = policy.backoff_s(retry) if wait is None else wait
        # The last attempt's latency, at least the configured minimum, must fit after the wait.
        needed = max(policy.min_attempt_s, time.monotonic() - started)
        left = deadline - time.monotonic()
        if delay + needed > left:
            raise ModelError(
                f"{vendor}: {failure}; a retry in {delay:.1f} s would not finish within the "
                f"{max(left, 0):.1f} s left"
            )
        log.warning("%s: %s; retrying in %.2f s", vendor, failure.splitlines()[0][:200], delay)
        await asyncio.sleep(delay)
        retry += 1


class ModelEndpoint:
    """One vendor's HTTP endpoint: a pooled client with its bearer key, streamed and retried."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        timeout_s: float,
        retry: RetryPolicy,
        vendor: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.retry = retry
        self._vendor = vendor
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                transport=self._transport,
                headers=self._headers,
            )
        return self._client

    async def stream(
        self,
        path: str,
        body: dict[str, Any],
        read: Callable[[httpx.Response], Awaitable[T]],
        deadline: float | None,
    ) -> T:
        """POST to `path` and fold the stream, within our timeout and the caller's deadline."""
        # The client first: building one (TLS context) is not part of the answer's budget.
        client = self._http()
        own = time.monotonic() + self.timeout_s
        return await stream_post(
            client,
            f"{self.base_url}{path}",
            body,
            read,
            deadline=own if deadline is None else min(own, deadline),
            policy=self.retry,
            vendor=self._vendor,
        )

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
