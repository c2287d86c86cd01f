"""HTTP routes. Handlers read raw bytes and validate with msgspec themselves, so every
malformed input gets a problem document (never FastAPI's default shape, never a 500).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastapi import APIRouter, Request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from libs.json_response import JSONResponse

from .fault_rules import FaultBody, business_error_code, header_fault, header_flag
from .problems import ProblemError, problem_response
from .records import KINDS, Kind, free_slots
from .replies import Reply
from .runtime import Provider
from .validation import (
    AccessBody,
    BookingBody,
    CompensateBody,
    InvalidRequestError,
    TransferBody,
    convert,
    decode_json,
    optional_idempotency_key,
    parse_create,
    parse_date_query,
    parse_resource_query,
    require_idempotency_key,
    validation_error,
)

MAX_BODY_BYTES: Final = 64 * 1024
# The bodies each route decodes itself, published in the OpenAPI document (libs.openapi).
BODIES: Final[dict[tuple[str, str], type[Any]]] = {
    ("/v1/accesses", "post"): AccessBody,
    ("/v1/bookings", "post"): BookingBody,
    ("/v1/transfers", "post"): TransferBody,
    ("/v1/accesses/{record_id}/revoke", "post"): CompensateBody,
    ("/v1/bookings/{record_id}/cancel", "post"): CompensateBody,
    ("/admin/faults", "post"): FaultBody,
}

Action = Callable[[], Awaitable[Response | Reply]]
Observe = Callable[[str, Action], Awaitable[Response]]


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refusing more than ``limit`` bytes even without Content-Length."""
    too_large = ProblemError(
        413, "body-too-large", "Request body too large", f"the body limit is {limit} bytes"
    )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


def _kind_query(raw: str | None) -> Kind | None:
    if raw is None or raw == "":
        return None
    if raw not in KINDS:
        raise validation_error(f"kind must be one of {', '.join(KINDS)}")
    return raw


def add_routes(router: APIRouter, provider: Provider) -> None:
    """Every route of the provider, on ``router`` (the app's own)."""
    metrics = provider.metrics

    async def observe(kind: str, action: Action) -> Response:
        """Run a handler body, counting its outcome and duration per endpoint kind."""
        started = time.perf_counter()
        outcome = "error"
        try:
            result = await action()
            if isinstance(result, Reply):
                outcome = result.outcome
                response = Response(
                    result.body,
                    status_code=result.status,
                    media_type=result.media_type,
                    headers=result.headers,
                )
            else:
                outcome = "ok"
                response = result
        except InvalidRequestError:
            outcome = "invalid"
            raise
        except ProblemError as exc:
            outcome = "not_found" if exc.status == 404 else "invalid"
            raise
        finally:
            metrics.requests.labels(kind, outcome).inc()
            metrics.request_seconds.labels(kind).observe(time.perf_counter() - started)
        return response

    for add in (_mutations, _reads, _admin):
        add(router, provider, observe)
    _operations(router, provider)


def _mutations(router: APIRouter, provider: Provider, observe: Observe) -> None:
    settings = provider.settings

    async def create(request: Request, kind: Kind) -> Reply:
        raw = await read_body(request)
        headers = request.headers
        ignore = kind == "transfer" and (
            settings.transfers_ignore_idempotency
            or header_flag(headers, "x-sandbox-ignore-idempotency")
        )
        raw_key = headers.get("idempotency-key")
        key = optional_idempotency_key(raw_key) if ignore else require_idempotency_key(raw_key)
        command = parse_create(kind, decode_json(raw))
        return await provider.running.engine.create(
            command,
            key=key,
            ignore_idempotency=ignore,
            request_fault=header_fault(headers),
            business_code=business_error_code(headers),
            want_async=header_flag(headers, "x-sandbox-async"),
            callback_twice=header_flag(headers, "x-sandbox-callback-twice"),
        )

    async def compensate(request: Request, kind: Kind, record_id: str) -> Reply:
        raw = await read_body(request)
        headers = request.headers
        key = require_idempotency_key(headers.get("idempotency-key"))
        body = convert(decode_json(raw), CompensateBody)
        return await provider.running.engine.compensate(
            kind,
            record_id,
            body,
            key=key,
            request_fault=header_fault(headers),
            business_code=business_error_code(headers),
        )

    @router.post("/v1/accesses")
    async def create_access(request: Request) -> Response:
        return await observe("access", lambda: create(request, "access"))

    @router.post("/v1/accesses/{record_id}/revoke")
    async def revoke_access(request: Request, record_id: str) -> Response:
        return await observe("access_revoke", lambda: compensate(request, "access", record_id))

    @router.post("/v1/bookings")
    async def create_booking(request: Request) -> Response:
        return await observe("booking", lambda: create(request, "booking"))

    @router.post("/v1/bookings/{record_id}/cancel")
    async def cancel_booking(request: Request, record_id: str) -> Response:
        return await observe("booking_cancel", lambda: compensate(request, "booking", record_id))

    @router.post("/v1/transfers")
    async def create_transfer(request: Request) -> Response:
        return await observe("transfer", lambda: create(request, "transfer"))



def _reads(router: APIRouter, provider: Provider, observe: Observe) -> None:

    @router.get("/v1/availability")
    async def availability(request: Request) -> Response:
        async def action() -> Response | Reply:
            query = request.query_params
            restaurant = parse_resource_query("restaurant", query.get("restaurant"))
            date = parse_date_query(query.get("date"))
            # Faults added for the restaurant's reads delay or fail this answer.
            faulted = await provider.running.engine.read_fault(
                restaurant, header_fault(request.headers)
            )
            if faulted is not None:
                return faulted
            return JSONResponse(
                {"restaurant": restaurant, "date": date, "slots": free_slots(restaurant, date)}
            )

        return await observe("availability", action)

    @router.get("/v1/lookup")
    async def lookup(request: Request) -> Response:
        async def action() -> Response:
            query = request.query_params
            key = query.get("key") or None
            reference = query.get("reference") or None
            if key is None and reference is None:
                raise validation_error("give ?key=<idempotency key> or ?reference=<reference>")
            result = provider.running.engine.lookup(
                key=key, reference=reference, kind=_kind_query(query.get("kind"))
            )
            return JSONResponse(result)

        return await observe("lookup", action)

    @router.get("/v1/records/{record_id}")
    async def get_record(record_id: str) -> Response:
        async def action() -> Response:
            record = provider.running.store.get_record(record_id)
            if record is None:
                raise ProblemError(404, "not-found", "Not found", f"no record {record_id!r}")
            return JSONResponse(record.view())

        return await observe("record", action)

    @router.get("/ledger")
    async def ledger(request: Request) -> Response:
        async def action() -> Response:
            query = request.query_params
            entries = provider.running.store.ledger(
                kind=_kind_query(query.get("kind")), key=query.get("key") or None
            )
            return JSONResponse({"entries": entries})

        return await observe("ledger", action)



def _admin(router: APIRouter, provider: Provider, observe: Observe) -> None:

    @router.post("/admin/faults")
    async def add_fault(request: Request) -> Response:
        async def action() -> Response:
            body = convert(decode_json(await read_body(request)), FaultBody)
            rule = provider.faults.add(body)
            return JSONResponse({"fault_id": rule.fault_id, "fault": rule.view()}, 201)

        return await observe("admin", action)

    @router.get("/admin/faults")
    async def list_faults() -> Response:
        return JSONResponse({"faults": provider.faults.views()})

    @router.delete("/admin/faults")
    async def clear_faults() -> Response:
        return JSONResponse({"cleared": provider.faults.clear()})

    @router.delete("/admin/faults/{fault_id}")
    async def delete_fault(fault_id: str) -> Response:
        if not provider.faults.remove(fault_id):
            raise ProblemError(404, "not-found", "Not found", f"no fault {fault_id!r}")
        return JSONResponse({"cleared": 1})



def _operations(router: APIRouter, provider: Provider) -> None:

    @router.get("/healthz")
    async def healthz() -> Response:
        return JSONResponse({"status": "ok"})

    @router.get("/readyz")
    async def readyz() -> Response:
        if not provider.started:
            return problem_response(503, "not-ready", "Not ready", "the provider is starting")
        try:
            provider.running.store.probe_write(time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        except (sqlite3.Error, OSError) as exc:
            return problem_response(
                503, "not-ready", "Not ready", f"database not writable: {type(exc).__name__}"
            )
        return JSONResponse({"status": "ready"})

    @router.get("/metrics")
    async def prometheus() -> Response:
        return Response(generate_latest(provider.metrics.registry), media_type=CONTENT_TYPE_LATEST)
