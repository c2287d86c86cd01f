"""The help-desk API: tickets (synchronous), refunds and payouts (202, then a webhook).

State lives in memory (an example, not a product): a restart forgets everything.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

log = logging.getLogger("examples.deskapi")

TOKEN_HEADER = "X-Request-Token"  # noqa: S105 - a header name, not a secret
SIGNATURE_HEADER = "X-Desk-Signature"
TIMESTAMP_HEADER = "X-Desk-Timestamp"
# kind → (id prefix, state while pending, state once done)
KINDS = {
    "ticket": ("T", None, "open"),
    "refund": ("R", "pending", "settled"),
    "payout": ("P", "processing", "paid"),
}


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """`sha256=<hex>` of HMAC-SHA256 over `<timestamp>.<body>`."""
    digest = hmac.new(secret, str(timestamp).encode() + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


@dataclass
class Fault:
    """An injected failure for POSTs under a path prefix."""

    fault_id: str
    path: str
    status: int | None = None
    retry_after_s: float | None = None
    hang_after_commit_s: float | None = None
    # Complete a 202 this much later than DESK_SETTLE_MS says.
    settle_s: float | None = None
    times: int | None = 1


@dataclass
class Stored:
    """What a request token has been used for, and the answer to repeat."""

    fingerprint: str
    status: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    in_flight: bool = True


@dataclass
class Desk:
    """All the API's state."""

    settle_s: float
    webhook_copies: int
    secret: bytes
    webhooks: dict[str, str]
    tokens: dict[str, Stored] = field(default_factory=dict)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    by_token: dict[tuple[str, str], str] = field(default_factory=dict)
    effects: dict[tuple[str, str], int] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    counter: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    # record id → its pending completion (a cancel stops it: no effect will ever follow)
    settling: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    # Every webhook POST made: url, request token, HTTP status or the error.
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    client: httpx.AsyncClient = field(default_factory=lambda: httpx.AsyncClient(timeout=5.0))

    def fault_for(self, path: str) -> Fault | None:
        for fault in self.faults:
            if path.startswith(fault.path) and (fault.times is None or fault.times > 0):
                if fault.times is not None:
                    fault.times -= 1
                return fault
        return None

    def create(self, kind: str, token: str, body: dict[str, Any]) -> dict[str, Any]:
        prefix, pending, done = KINDS[kind]
        self.counter += 1
        record = {
            "id": f"{prefix}-{self.counter}",
            "kind": kind,
            "request_token": token,
            **body,
            "status": pending or done,
        }
        self.records[record["id"]] = record
        self.by_token[(kind, token)] = record["id"]
        if pending is None:
            self.effects[(kind, token)] = self.effects.get((kind, token), 0) + 1
        return record

    async def notify(self, kind: str, record: dict[str, Any]) -> None:
        """The signed webhook of a completion, `webhook_copies` times, retried on failure."""
        url = self.webhooks.get(kind)
        if not url:
            return
        payload = {
            "event_id": f"evt_{uuid.uuid4().hex[:16]}",
            "event": f"{kind}.{record['status']}",
            "request_token": record["request_token"],
            kind: record,
        }
        body = json.dumps(payload, separators=(",", ":")).encode()
        sent = {"url": url, "request_token": record["request_token"]}
        for _copy in range(self.webhook_copies):
            for attempt in range(5):
                stamp = int(time.time())
                headers = {
                    "Content-Type": "application/json",
                    TIMESTAMP_HEADER: str(stamp),
                    SIGNATURE_HEADER: sign(self.secret, stamp, body),
                }
                try:
                    answer = await self.client.post(url, content=body, headers=headers)
                except httpx.HTTPError as exc:
                    log.info("webhook to %s failed: %s", url, exc)
                    self.deliveries.append({**sent, "error": repr(exc)})
                else:
                    self.deliveries.append({**sent, "status": answer.status_code})
                    if answer.status_code < 500:
                        break
                await asyncio.sleep(0.2 * 2**attempt)

    async def settle(self, record: dict[str, Any], delay_s: float) -> None:
        """Complete a pending record later (unless it was cancelled meanwhile)."""
        await asyncio.sleep(delay_s)
        kind = record["kind"]
        if record["status"] != KINDS[kind][1]:
            return
        record["status"] = KINDS[kind][2]
        key = (kind, record["request_token"])
        self.effects[key] = self.effects.get(key, 0) + 1
        await self.notify(kind, record)

    async def mutate(self, kind: str, request: Request) -> Response:
        """A POST under this API's idempotency rules."""
        fault = self.fault_for(request.url.path)
        if fault is not None and fault.status is not None:
            headers = {}
            if fault.retry_after_s is not None:
                headers["Retry-After"] = str(int(fault.retry_after_s))
            return JSONResponse({"error": "injected"}, fault.status, headers=headers)
        token = request.headers.get(TOKEN_HEADER, "").strip()
        if not token:
            return JSONResponse({"error": f"{TOKEN_HEADER} is required"}, 400)
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": "body must be JSON"}, 400)
        if not isinstance(body, dict):
            return JSONResponse({"error": "body must be a JSON object"}, 400)
        fingerprint = _fingerprint(kind, body)
        stored = self.tokens.get(token)
        if stored is not None:
            if stored.fingerprint != fingerprint:
                return JSONResponse({"error": "request token reused with another body"}, 409)
            if stored.in_flight:
                return JSONResponse(
                    {"error": "a request with this token is in progress"},
                    425,
                    headers={"Retry-After": "1"},
                )
            return JSONResponse(stored.body, stored.status, headers={"X-Replayed": "true"})
        stored = self.tokens[token] = Stored(fingerprint)
        record = self.create(kind, token, body)
        status = 201 if KINDS[kind][1] is None else 202
        if status == 202:
            delay = self.settle_s if fault is None or fault.settle_s is None else fault.settle_s
            task = asyncio.create_task(self.settle(record, delay))
            self.tasks.add(task)
            self.settling[record["id"]] = task
            task.add_done_callback(self.tasks.discard)
            task.add_done_callback(lambda _t: self.settling.pop(record["id"], None))
        stored.status, stored.body = status, dict(record)
        try:
            if fault is not None and fault.hang_after_commit_s:
                # Committed, and the answer is late: the caller's timeout decides what it knows.
                await asyncio.sleep(fault.hang_after_commit_s)
        finally:
            stored.in_flight = False
        return JSONResponse(record, status)

    def find(
        self, collection: str, *, token: str | None = None, record_id: str | None = None
    ) -> Response:
        """A record by request token or by id, within its collection."""
        kind = collection.removesuffix("s")
        if kind not in KINDS:
            return JSONResponse({"error": f"no collection {collection}"}, 404)
        if token is not None:
            record_id = self.by_token.get((kind, token))
        record = self.records.get(record_id or "")
        if record is None or record["kind"] != kind:
            return JSONResponse({"error": f"no such {kind}"}, 404)
        return JSONResponse(record)

    async def stop(self) -> None:
        """Cancel pending completions and close the webhook client."""
        for task in list(self.tasks):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.client.aclose()


def _fingerprint(kind: str, body: Any) -> str:
    canonical = json.dumps([kind, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _desk(request: Request) -> Desk:
    desk: Desk = request.app.state.desk
    return desk


router = APIRouter()


@router.post("/tickets")
async def open_ticket(request: Request) -> Response:
    """Open a ticket (201 at once)."""
    return await _desk(request).mutate("ticket", request)


@router.post("/refunds")
async def refund(request: Request) -> Response:
    """Refund an order (202; settled later, then the webhook)."""
    return await _desk(request).mutate("refund", request)


@router.post("/payouts")
async def payout(request: Request) -> Response:
    """Pay money out (202; paid later, then the webhook)."""
    return await _desk(request).mutate("payout", request)


@router.post("/refunds/{record_id}/cancel")
async def cancel_refund(record_id: str, request: Request) -> Response:
    """Cancel a refund that has not settled (a settled one is a 409)."""
    record = _desk(request).records.get(record_id)
    if record is None or record["kind"] != "refund":
        return JSONResponse({"error": f"no refund {record_id}"}, 404)
    if record["status"] == "settled":
        return JSONResponse({"error": "already settled", **record}, 409)
    record["status"] = "cancelled"
    pending = _desk(request).settling.get(record_id)
    if pending is not None:
        pending.cancel()
    return JSONResponse(record)


@router.get("/ledger")
async def ledger(request: Request) -> dict[str, Any]:
    """Real effects per request token."""
    desk = _desk(request)
    entries = [
        {"kind": kind, "request_token": token, "id": desk.by_token.get((kind, token)), "effects": n}
        for (kind, token), n in desk.effects.items()
    ]
    return {"entries": entries}


@router.get("/readyz")
async def ready() -> dict[str, str]:
    """Up and serving."""
    return {"status": "ready"}


@router.get("/admin/activity")
async def activity(request: Request) -> dict[str, Any]:
    """Completions still to come and every webhook sent (for tests and demos)."""
    desk = _desk(request)
    return {"pending": len(desk.tasks), "webhooks": desk.deliveries}


@router.post("/admin/faults")
async def add_fault(request: Request) -> Response:
    """Fail POSTs under `path`: `status`, `retry_after_s`, `hang_after_commit_s`, `times`."""
    try:
        fault = Fault(fault_id=f"f_{uuid.uuid4().hex[:8]}", **(await request.json()))
    except (TypeError, ValueError) as exc:
        return JSONResponse({"error": str(exc)}, 422)
    _desk(request).faults.append(fault)
    return JSONResponse({"fault_id": fault.fault_id}, 201)


@router.delete("/admin/faults", status_code=204)
async def clear_faults(request: Request) -> Response:
    """Remove every injected failure."""
    _desk(request).faults.clear()
    return Response(status_code=204)


# Last: the generic reads would otherwise shadow /admin/... and /readyz.
@router.get("/{collection}/by-token/{token}")
async def find_by_token(collection: str, token: str, request: Request) -> Response:
    """What a request token created: 200 with the record, or 404."""
    return _desk(request).find(collection, token=token)


@router.get("/{collection}/{record_id}")
async def read(collection: str, record_id: str, request: Request) -> Response:
    """A record by id."""
    return _desk(request).find(collection, record_id=record_id)


def create_app() -> FastAPI:
    """The API, configured from DESK_* environment variables."""
    desk = Desk(
        settle_s=float(os.environ.get("DESK_SETTLE_MS", "800")) / 1000,
        webhook_copies=int(os.environ.get("DESK_WEBHOOK_COPIES", "1")),
        secret=os.environ.get("DESK_WEBHOOK_SECRET", "desk-dev-secret").encode(),
        webhooks={
            "refund": os.environ.get("DESK_REFUND_WEBHOOK_URL", ""),
            "payout": os.environ.get("DESK_PAYOUT_WEBHOOK_URL", ""),
        },
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        await desk.stop()

    app = FastAPI(title="deskapi (holdline example)", lifespan=lifespan)
    app.state.desk = desk
    app.include_router(router)
    return app
