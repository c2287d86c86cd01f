"""The executor of HTTP tools declared in a file (docs/contract.md §7b): any API, no code.

Every mutation carries the operation's idempotency key in the declared header. 2xx is
committed (the JSON body is the result), 202 is accepted for async completion (a signed
callback or a poll of the lookup), declared retryable statuses are retried (Retry-After
honoured), other answers are final, and a timeout or a lost answer is UNKNOWN: the worker
looks the effect up before it sends anything again.

Hardening: the declared headers (credentials from `${ENV}`) go with every request; an
answer over `max_response_bytes` is not read further and fails the attempt; each exchange
has a total deadline (the attempt timeout) on top of the per-phase ones; a URL whose values
would change the resource it names is refused before anything is sent; errors name the
endpoint's template and the field, never a filled-in URL or a header value. Every request
names the session's tenant and user in signed headers (identity_headers.py), also usable
in URL templates as `{holdline.tenant}` and `{holdline.user}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import msgspec

from libs.events import AttemptOutcome

from .executor import (
    AttemptResult,
    CallbackRefused,
    CallbackResult,
    Lookup,
    OperationCall,
    bad_callback,
    bad_signature,
)
from .identity_headers import identity_headers
from .templates import Template, TemplateError, dig
from .wire import Answer, HttpClient, ResponseTooLarge, classify_exception

DEFAULT_RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})
# The default of `max_response_bytes` (`HOLDLINE_HTTP_MAX_RESPONSE_BYTES` sets it per process).
DEFAULT_MAX_RESPONSE_BYTES = 1 << 20
_TOLERANCE_S = 300.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One request: method, URL template and (for mutations) the idempotency header."""

    method: str
    url: Template
    idempotency_header: str | None = None


@dataclass(frozen=True, slots=True)
class States:
    """How the system of record's JSON says where an effect stands."""

    field: str = "status"
    pending: frozenset[str] = frozenset({"pending", "accepted", "queued", "processing"})
    failed: frozenset[str] = frozenset({"failed", "rejected", "error", "declined"})
    cancelled: frozenset[str] = frozenset({"cancelled", "canceled", "withdrawn", "voided"})

    def lookup(self, body: dict[str, Any], ref: str | None) -> Lookup:
        """A record's state; a record without the field counts as committed."""
        status = str(dig(body, self.field) or "").lower()
        if status in self.pending:
            return Lookup("pending", result=body, provider_ref=ref)
        if status in self.failed:
            return Lookup("failed", result=body, provider_ref=ref, detail=status)
        if status in self.cancelled:
            return Lookup("cancelled", result=body, provider_ref=ref)
        return Lookup("committed", result=body, provider_ref=ref)


@dataclass(frozen=True, slots=True)
class Callbacks:
    """How the API's webhooks are verified and read."""

    secret: bytes
    signature_header: str
    timestamp_header: str | None = None
    key_field: str = "idempotency_key"
    result_field: str = ""


@dataclass(frozen=True, slots=True)
class HttpSpec:
    """Everything the executor knows about one tool's API."""

    execute: Endpoint
    lookup: Endpoint | None = None
    cancel: Endpoint | None = None
    retryable: frozenset[int] = DEFAULT_RETRYABLE
    states: States = States()
    id_field: str = "id"
    callbacks: Callbacks | None = None
    # Longest answer read; a longer one fails the attempt (or the lookup).
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    # Sent with every request (credentials, read from the environment at start).
    headers: tuple[tuple[str, str], ...] = ()
    # Signs the tenant and user headers (identity_headers.py); None: sent unsigned.
    identity_secret: bytes | None = None


def retry_after_s(value: str | None, *, now: float) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now)


def _json(response: Answer) -> dict[str, Any]:
    if not response.content:
        return {}
    try:
        parsed = response.json()
    except ValueError:
        return {"raw": response.text[:500]}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _public(arguments: Mapping[str, Any]) -> dict[str, Any]:
    # `_degraded` and the like are holdline's own markers, not the API's business.
    return {k: v for k, v in arguments.items() if not k.startswith("_")}


class HttpExecutor:
    """One file-declared tool against its HTTP API."""

    def __init__(self, spec: HttpSpec, client: HttpClient) -> None:
        self._spec = spec
        self._client = client

    def _values(self, call: OperationCall, result: Mapping[str, Any] | None) -> dict[str, Any]:
        return {
            **_public(call.arguments),
            "idempotency_key": call.idempotency_key,
            "result": dict(result or {}),
            # `{holdline.tenant}`, `{holdline.user}`: the session's, never an argument's.
            "holdline": {"tenant": call.tenant_id, "user": call.user_id},
        }

    async def _send(
        self, endpoint: Endpoint, url: str, call: OperationCall, *, timeout_s: float,
        **kwargs: Any,
    ) -> Answer:
        """One exchange with the declared headers, the tenant and user signed, the size cap
        and a total deadline."""
        headers = {
            **dict(self._spec.headers),
            **identity_headers(
                call.tenant_id, call.user_id, secret=self._spec.identity_secret, now=time.time()
            ),
            **kwargs.pop("headers", {}),
        }
        try:
            async with asyncio.timeout(timeout_s):
                return await self._client.request(
                    endpoint.method, url, timeout_s=timeout_s, headers=headers,
                    max_bytes=self._spec.max_response_bytes, **kwargs,
                )
        except TimeoutError:
            # The whole exchange took too long (a slow drip, say): it may have landed.
            raise httpx.ReadTimeout(f"no whole answer within {timeout_s} s") from None

    def _scrubbed(self, endpoint: Endpoint, exc: Exception) -> str:
        # A transport error's text may carry the filled-in URL: name the template instead.
        return f"{type(exc).__name__} on {endpoint.method} {endpoint.url.text}"

    def _ref(self, body: dict[str, Any]) -> str | None:
        ref = dig(body, self._spec.id_field)
        return None if ref is None or isinstance(ref, dict | list) else str(ref)

    def classify(self, response: Answer, elapsed_ms: float) -> AttemptResult:
        """Map the API's answer to an attempt outcome (pure)."""
        status = response.status_code
        body = _json(response)
        wait = retry_after_s(response.headers.get("retry-after"), now=time.time())
        detail = str(body.get("detail") or body.get("error") or body.get("message") or "")
        if status == 202:
            return AttemptResult(
                "accepted_async",
                status,
                result=body,
                provider_ref=self._ref(body),
                duration_ms=elapsed_ms,
            )
        if 200 <= status < 300:
            return AttemptResult(
                "success",
                status,
                result=body,
                provider_ref=self._ref(body),
                duration_ms=elapsed_ms,
            )
        if status in self._spec.retryable:
            outcome: AttemptOutcome = "rate_limited" if status == 429 else "server_error"
            return AttemptResult(outcome, status, wait, detail=detail, duration_ms=elapsed_ms)
        return AttemptResult(
            "business_error",
            status,
            result=body,
            detail=f"HTTP {status} {detail}".strip(),
            duration_ms=elapsed_ms,
        )

    async def execute(self, call: OperationCall, *, timeout_s: float) -> AttemptResult:
        """One attempt: the arguments as the JSON body (query for GET), key in the header."""
        endpoint = self._spec.execute
        values = self._values(call, None)
        try:
            url = endpoint.url.render(values, url=True)
        except TemplateError as exc:
            # Final, and nothing was sent: the same arguments would be refused again.
            return AttemptResult("business_error", detail=f"refused before sending: {exc}")
        headers = {}
        if endpoint.idempotency_header:
            headers[endpoint.idempotency_header] = call.idempotency_key
        body = _public(call.arguments)
        started = time.perf_counter()
        try:
            if endpoint.method == "GET":
                params = {k: str(v) for k, v in body.items() if k not in endpoint.url.fields}
                response = await self._send(
                    endpoint, url, call, params=params, headers=headers, timeout_s=timeout_s
                )
            else:
                response = await self._send(
                    endpoint, url, call, json=body, headers=headers, timeout_s=timeout_s
                )
        except ResponseTooLarge as exc:
            return AttemptResult(
                "business_error",
                detail=f"answer larger than max_response_bytes ({exc.max_bytes}), not read",
                duration_ms=(time.perf_counter() - started) * 1000,
            )
        except httpx.HTTPError as exc:
            result = classify_exception(exc, (time.perf_counter() - started) * 1000)
            return replace(result, detail=self._scrubbed(endpoint, exc))
        return self.classify(response, (time.perf_counter() - started) * 1000)

    async def lookup(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """200: the effect exists (its state from the body); 404: it does not."""
        endpoint = self._spec.lookup
        if endpoint is None:
            return Lookup("error", detail="no http.lookup declared")
        try:
            url = endpoint.url.render(self._values(call, call.result), url=True)
            response = await self._send(endpoint, url, call, timeout_s=timeout_s)
        except TemplateError as exc:
            return Lookup("error", detail=f"lookup URL: {exc}")
        except ResponseTooLarge as exc:
            return Lookup("error", detail=f"lookup answer larger than {exc.max_bytes} bytes")
        except httpx.HTTPError as exc:
            return Lookup("error", detail=self._scrubbed(endpoint, exc))
        if response.status_code == 404:
            return Lookup("absent")
        if response.status_code != 200:
            return Lookup("error", detail=f"lookup answered HTTP {response.status_code}")
        body = _json(response)
        return self._spec.states.lookup(body, self._ref(body))

    async def poll(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """An async effect's state, through the lookup."""
        return await self.lookup(call, timeout_s=timeout_s)

    async def cancel(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Cancel a pending effect; what already committed stays committed."""
        endpoint = self._spec.cancel
        if endpoint is None:
            return Lookup("error", detail="no http.cancel declared")
        found = await self.lookup(call, timeout_s=timeout_s)
        if found.state != "pending":
            return found
        try:
            url = endpoint.url.render(self._values(call, found.result), url=True)
        except TemplateError as exc:
            return Lookup("error", detail=f"cancel URL: {exc}")
        headers = {}
        if endpoint.idempotency_header:
            headers[endpoint.idempotency_header] = f"{call.idempotency_key}:cancel"
        try:
            response = await self._send(endpoint, url, call, headers=headers, timeout_s=timeout_s)
        except httpx.HTTPError as exc:
            return Lookup("error", detail=self._scrubbed(endpoint, exc))
        if 200 <= response.status_code < 300:
            return Lookup("cancelled", result=_json(response), provider_ref=found.provider_ref)
        # Refused (committed meanwhile, say): the system of record says what it holds.
        return await self.lookup(call, timeout_s=timeout_s)

    def parse_callback(
        self, headers: Mapping[str, str], body: bytes, *, now: float
    ) -> CallbackResult:
        """A webhook signed with HMAC-SHA256 of the body (or `<timestamp>.<body>`)."""
        spec = self._spec.callbacks
        if spec is None:
            raise CallbackRefused(
                404, "Not found", "this tool declares no callbacks", slug="no-callbacks"
            )
        message = body
        if spec.timestamp_header:
            stamp = (headers.get(spec.timestamp_header) or "").strip()
            if (
                not stamp.isdigit()
                or not math.isfinite(now)
                or abs(now - int(stamp)) > _TOLERANCE_S
            ):
                raise bad_signature()
            message = stamp.encode() + b"." + body
        expected = hmac.new(spec.secret, message, hashlib.sha256).hexdigest()
        given = (headers.get(spec.signature_header) or "").strip().removeprefix("sha256=")
        if not given or not hmac.compare_digest(expected.encode(), given.encode()):
            raise bad_signature()
        try:
            payload = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_callback(str(exc)) from None
        key = dig(payload, spec.key_field)
        result = dig(payload, spec.result_field)
        if not isinstance(key, str) or not key:
            raise bad_callback(f"callback has no {spec.key_field}")
        if not isinstance(result, dict):
            raise bad_callback(f"callback has no object at {spec.result_field or 'its root'}")
        return CallbackResult(
            operation_id=key, found=self._spec.states.lookup(result, self._ref(result))
        )
