"""The payouts executor: the whole executor contract against the example help-desk API."""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Mapping
from typing import Any

import httpx
import msgspec

from libs.events import AttemptOutcome
from libs.tools import AttemptResult, CallbackResult, Lookup, OperationCall
from libs.tools.executor import bad_callback, bad_signature

_TOLERANCE_S = 300


def _state(record: Mapping[str, Any]) -> Lookup:
    ref = str(record.get("id")) if record.get("id") else None
    match record.get("status"):
        case "paid":
            return Lookup("committed", result=dict(record), provider_ref=ref)
        case "processing":
            return Lookup("pending", result=dict(record), provider_ref=ref)
        case "failed":
            return Lookup("failed", result=dict(record), provider_ref=ref, detail="payout failed")
    return Lookup("error", result=dict(record), detail=f"unknown status {record.get('status')!r}")


class PayoutsExecutor:
    """Payouts are irreversible: `cancel` only reports what the API holds."""

    def __init__(self) -> None:
        self._base = os.environ.get("DESK_API_URL", "http://127.0.0.1:8095")
        self._secret = os.environ.get("DESK_WEBHOOK_SECRET", "desk-dev-secret").encode()
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        # Created on first use, inside the worker's event loop.
        if self._client is None:
            self._client = httpx.AsyncClient(base_url=self._base)
        return self._client

    async def execute(self, call: OperationCall, *, timeout_s: float) -> AttemptResult:
        """POST /payouts with the operation's key as the request token."""
        body = {k: v for k, v in call.arguments.items() if not k.startswith("_")}
        started = time.perf_counter()
        try:
            answer = await self.client.post(
                "/payouts",
                json=body,
                headers={"X-Request-Token": call.idempotency_key},
                timeout=timeout_s,
            )
        except httpx.ConnectError as exc:
            return AttemptResult("connect_error", detail=repr(exc))
        except httpx.HTTPError as exc:
            # Sent, and no answer: it may have happened. The worker looks it up first.
            return AttemptResult("timeout_after_send", detail=repr(exc))
        elapsed = (time.perf_counter() - started) * 1000
        record = answer.json() if answer.content else {}
        ref = str(record.get("id")) if isinstance(record, dict) and record.get("id") else None
        match answer.status_code:
            case 202:
                return AttemptResult("accepted_async", 202, result=record, provider_ref=ref)
            case 200 | 201:
                return AttemptResult("success", answer.status_code, result=record, provider_ref=ref)
            case 425:
                retry = float(answer.headers.get("retry-after", "1"))
                return AttemptResult("in_flight_conflict", 425, retry, duration_ms=elapsed)
            case 429 | 500 | 502 | 503 | 504:
                retry_header = answer.headers.get("retry-after")
                retry_after = float(retry_header) if retry_header else None
                outcome: AttemptOutcome = (
                    "rate_limited" if answer.status_code == 429 else "server_error"
                )
                return AttemptResult(outcome, answer.status_code, retry_after, duration_ms=elapsed)
        return AttemptResult(
            "business_error", answer.status_code, detail=str(record.get("error", ""))
        )

    async def lookup(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """What the API holds under the operation's request token."""
        try:
            answer = await self.client.get(
                f"/payouts/by-token/{call.idempotency_key}", timeout=timeout_s
            )
        except httpx.HTTPError as exc:
            return Lookup("error", detail=repr(exc))
        if answer.status_code == 404:
            return Lookup("absent")
        if answer.status_code != 200:
            return Lookup("error", detail=f"HTTP {answer.status_code}")
        return _state(answer.json())

    async def poll(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """An awaited payout, by its id when known."""
        if not call.provider_ref:
            return await self.lookup(call, timeout_s=timeout_s)
        try:
            answer = await self.client.get(f"/payouts/{call.provider_ref}", timeout=timeout_s)
        except httpx.HTTPError as exc:
            return Lookup("error", detail=repr(exc))
        if answer.status_code != 200:
            return Lookup("error", detail=f"HTTP {answer.status_code}")
        return _state(answer.json())

    async def cancel(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Irreversible: nothing to ask; the worker gets the API's truth."""
        return await self.lookup(call, timeout_s=timeout_s)

    def parse_callback(
        self, headers: Mapping[str, str], body: bytes, *, now: float
    ) -> CallbackResult:
        """`X-Desk-Signature: sha256=HMAC(secret, "<X-Desk-Timestamp>.<body>")`."""
        stamp = (headers.get("x-desk-timestamp") or "").strip()
        if not stamp.isdigit() or abs(now - int(stamp)) > _TOLERANCE_S:
            raise bad_signature()
        expected = hmac.new(self._secret, stamp.encode() + b"." + body, hashlib.sha256)
        given = (headers.get("x-desk-signature") or "").removeprefix("sha256=")
        if not hmac.compare_digest(expected.hexdigest().encode(), given.encode()):
            raise bad_signature()
        try:
            payload = msgspec.json.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_callback(str(exc)) from None
        record = payload.get("payout") if isinstance(payload, dict) else None
        token = payload.get("request_token") if isinstance(payload, dict) else None
        if not isinstance(record, dict) or not isinstance(token, str) or not token:
            raise bad_callback("a payout webhook carries request_token and payout")
        return CallbackResult(
            operation_id=token, found=_state(record), callback_id=payload.get("event_id")
        )
