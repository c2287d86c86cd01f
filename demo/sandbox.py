"""Executors for the demo tools against the sandbox provider's HTTP API.

Every mutation carries the operation's idempotency key and its reference
(`<session_id>/<operation_id>`), so a lost answer can be looked up before anything is resent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import msgspec

from libs.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from libs.tools.executor import (
    AttemptResult,
    CallbackResult,
    Lookup,
    OperationCall,
    bad_callback,
    bad_signature,
)
from libs.tools.wire import Answer, HttpClient, classify_exception

# The route segment the sandbox provider posts its callbacks to (`/v1/callbacks/sandbox`).
CALLBACK_ROUTE = "sandbox"


class _CallbackBody(msgspec.Struct, frozen=True, kw_only=True):
    """What a sandbox completion callback must carry (other fields are ignored)."""

    callback_id: str
    reference: str | None = None
    status: str
    record: dict[str, Any]


_CALLBACK = msgspec.json.Decoder(_CallbackBody)

_COMMITTED = {"granted", "confirmed", "completed", "revoked", "cancelled"}


def classify_response(response: Answer, elapsed_ms: float) -> AttemptResult:
    """Map an HTTP answer to an attempt outcome (pure; no retry decisions here)."""
    status = response.status_code
    body: dict[str, Any] = {}
    if response.content:
        try:
            parsed = response.json()
        except ValueError:
            parsed = {"raw": response.text[:500]}
        body = parsed if isinstance(parsed, dict) else {"value": parsed}
    retry_after = _retry_after(response.headers.get("retry-after"))
    ref = str(body["id"]) if "id" in body else None
    detail = str(body.get("detail") or body.get("title") or "")
    if status in (200, 201):
        return AttemptResult(
            "success", status, result=body, provider_ref=ref, duration_ms=elapsed_ms
        )
    if status == 202:
        return AttemptResult(
            "accepted_async", status, result=body, provider_ref=ref, duration_ms=elapsed_ms
        )
    if status == 409:
        return AttemptResult(
            "in_flight_conflict", status, retry_after, detail=detail, duration_ms=elapsed_ms
        )
    if status == 422:
        return AttemptResult("idempotency_conflict", status, detail=detail, duration_ms=elapsed_ms)
    if status == 429:
        return AttemptResult(
            "rate_limited", status, retry_after, detail=detail, duration_ms=elapsed_ms
        )
    if status >= 500:
        return AttemptResult(
            "server_error", status, retry_after, detail=detail, duration_ms=elapsed_ms
        )
    code = str(body.get("code") or "")
    return AttemptResult(
        "business_error",
        status,
        result=body,
        detail=f"{code} {detail}".strip(),
        duration_ms=elapsed_ms,
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Route:
    """How one tool maps onto the sandbox API."""

    kind: str
    create: Callable[[OperationCall], tuple[str, str, dict[str, Any] | None]]
    cancel_path: Callable[[str], str] | None = None
    asynchronous: bool = False
    read_only: bool = False


def _body(call: OperationCall, *copied: str, **fields: Any) -> dict[str, Any]:
    """The request body: who and which operation, the arguments named in `copied` as they
    are, then `fields`."""
    return {
        "tenant_id": call.tenant_id,
        "user_id": call.user_id,
        "reference": call.reference,
        **{name: call.arguments[name] for name in copied},
        **fields,
    }


def _access(call: OperationCall) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", "/v1/accesses", _body(call, resource=call.arguments["access"])


def _revoke(call: OperationCall) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", f"/v1/accesses/{call.arguments['access_id']}/revoke", _body(call)


def _booking(call: OperationCall) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", "/v1/bookings", _body(call, "restaurant", "date", "time", "party_size")


def _cancel_booking(call: OperationCall) -> tuple[str, str, dict[str, Any] | None]:
    return "POST", f"/v1/bookings/{call.arguments['booking_id']}/cancel", _body(call)


def _transfer(call: OperationCall) -> tuple[str, str, dict[str, Any] | None]:
    copied = ("from_account", "to_account", "amount_cents", "currency")
    return "POST", "/v1/transfers", _body(call, *copied)


def _availability(call: OperationCall) -> tuple[str, str, dict[str, Any] | None]:
    a = call.arguments
    return "GET", f"/v1/availability?restaurant={a['restaurant']}&date={a['date']}", None


class SandboxExecutor:
    """An executor for one tool against the sandbox provider."""

    def __init__(
        self,
        route: Route,
        client: HttpClient,
        *,
        callback_twice: bool = False,
        callback_secret: bytes = b"",
    ) -> None:
        self._route = route
        self._client = client
        self._callback_twice = callback_twice
        self._secret = callback_secret

    def _headers(self, call: OperationCall) -> dict[str, str]:
        headers = {"Idempotency-Key": call.idempotency_key}
        if self._route.asynchronous:
            headers["X-Sandbox-Async"] = "1"
            if self._callback_twice:
                headers["X-Sandbox-Callback-Twice"] = "1"
        return headers

    async def execute(self, call: OperationCall, *, timeout_s: float) -> AttemptResult:
        """One attempt; degraded reads answer without touching the provider."""
        method, path, body = self._route.create(call)
        if self._route.read_only and call.arguments.get("_degraded"):
            return AttemptResult("success", None, result={"degraded": True, "slots": []})
        started = time.perf_counter()
        try:
            response = await self._client.request(
                method,
                path,
                json=body,
                headers=self._headers(call) if method != "GET" else None,
                timeout_s=timeout_s,
            )
        except httpx.HTTPError as exc:
            return classify_exception(exc, (time.perf_counter() - started) * 1000)
        return classify_response(response, (time.perf_counter() - started) * 1000)

    async def lookup(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Find the effect by reference (works even when the provider ignored the key)."""
        found = await self._records(call, timeout_s=timeout_s)
        if found is not None:
            return found
        if await self._in_flight(call, timeout_s=timeout_s):
            # The key is claimed by a request the provider is still working on: it may yet
            # commit, so "absent" would be a lie. Ask again later.
            return Lookup("error", detail="a request under this key is still in flight")
        # The request may have finished between the two questions: only a second look at
        # the records, now that nothing is in flight, can say "absent".
        return await self._records(call, timeout_s=timeout_s) or Lookup("absent")

    async def _records(self, call: OperationCall, *, timeout_s: float) -> Lookup | None:
        """The record this operation created (None: none yet; an error Lookup on failure)."""
        try:
            response = await self._client.request(
                "GET",
                "/v1/lookup",
                params={"reference": call.reference, "kind": self._route.kind},
                timeout_s=timeout_s,
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            return Lookup("error", detail=repr(exc))
        records = [
            r for r in response.json().get("records", []) if r.get("kind") == self._route.kind
        ]
        return lookup_from_record(records[0]) if records else None

    async def _in_flight(self, call: OperationCall, *, timeout_s: float) -> bool:
        try:
            response = await self._client.request(
                "GET", "/v1/lookup", params={"key": call.idempotency_key}, timeout_s=timeout_s
            )
            response.raise_for_status()
        except httpx.HTTPError:
            return True  # unknown is not absent
        return bool(response.json().get("in_flight"))

    async def poll(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Read an async record's current state (by its id, else by reference)."""
        if not call.provider_ref:
            return await self.lookup(call, timeout_s=timeout_s)
        try:
            response = await self._client.request(
                "GET", f"/v1/records/{call.provider_ref}", timeout_s=timeout_s
            )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            return Lookup("error", detail=repr(exc))
        return lookup_from_record(response.json())

    async def cancel(self, call: OperationCall, *, timeout_s: float) -> Lookup:
        """Ask the provider to cancel the record this operation created."""
        if self._route.cancel_path is None:
            return Lookup("error", detail="not cancellable")
        found = await self.lookup(call, timeout_s=timeout_s)
        if found.state in {"absent", "error", "cancelled", "failed"}:
            return found
        if found.state == "committed":
            return found
        assert found.provider_ref is not None
        try:
            response = await self._client.request(
                "POST",
                self._route.cancel_path(found.provider_ref),
                json=_body(call),
                headers={"Idempotency-Key": f"{call.idempotency_key}:cancel"},
                timeout_s=timeout_s,
            )
        except httpx.HTTPError as exc:
            return Lookup("error", detail=repr(exc))
        if response.status_code >= 400:
            return await self.lookup(call, timeout_s=timeout_s)
        return lookup_from_record(response.json())

    def parse_callback(
        self, headers: Mapping[str, str], body: bytes, *, now: float
    ) -> CallbackResult:
        """A sandbox completion, signed with the shared secret (libs.signing)."""
        if not self._secret or not verify(
            self._secret,
            headers.get(TIMESTAMP_HEADER),
            headers.get(SIGNATURE_HEADER),
            body,
            now=now,
        ):
            raise bad_signature()
        try:
            payload = _CALLBACK.decode(body)
        except msgspec.DecodeError as exc:
            raise bad_callback(str(exc)) from None
        session_id, _, operation_id = (payload.reference or "").partition("/")
        if not session_id or not operation_id:
            raise bad_callback("callback carries no reference")
        return CallbackResult(
            operation_id=operation_id,
            found=lookup_from_record(payload.record),
            session_id=session_id,
            callback_id=payload.callback_id,
        )


def lookup_from_record(record: dict[str, Any]) -> Lookup:
    status = str(record.get("status", ""))
    ref = str(record["id"]) if "id" in record else None
    if status == "pending":
        return Lookup("pending", result=record, provider_ref=ref)
    if (
        status == "cancelled"
        and record.get("kind") == "booking"
        and not record.get("committed", True)
    ):
        return Lookup("cancelled", result=record, provider_ref=ref)
    if status in _COMMITTED:
        return Lookup("committed", result=record, provider_ref=ref)
    if status == "failed":
        return Lookup(
            "failed", result=record, provider_ref=ref, detail=str(record.get("detail", ""))
        )
    return Lookup("committed", result=record, provider_ref=ref)


ROUTES: dict[str, Route] = {
    "sandbox.access": Route("access", _access),
    "sandbox.revoke_access": Route("access", _revoke),
    "sandbox.booking": Route(
        "booking", _booking, cancel_path=lambda rid: f"/v1/bookings/{rid}/cancel", asynchronous=True
    ),
    "sandbox.cancel_booking": Route("booking", _cancel_booking),
    "sandbox.transfer": Route("transfer", _transfer),
    "sandbox.availability": Route("availability", _availability, read_only=True),
}
