"""Pure logic of the sandbox provider: validation, idempotency decisions, fault matching,
record transitions and ledger keys. Nothing here does I/O or reads a clock.

Over 400 lines on purpose: it is the system of record's whole rule book (every resource's
validation and transitions), one pure module that the engine and its tests read.
"""

from __future__ import annotations

import datetime as dt
import enum
import fnmatch
import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Annotated, Any, Final, Literal, TypeVar

import msgspec

_T = TypeVar("_T")

Kind = Literal["access", "booking", "transfer"]
KINDS: Final[tuple[Kind, ...]] = ("access", "booking", "transfer")

# Idempotency keys are scoped per endpoint: the same key on /v1/accesses and on
# /v1/bookings names two unrelated requests.
Scope = Literal["access", "access_revoke", "booking", "booking_cancel", "transfer"]

PENDING: Final = "pending"
COMMITTED_STATUS: Final[Mapping[Kind, str]] = {
    "access": "granted",
    "booking": "confirmed",
    "transfer": "completed",
}
# Transfers are irreversible, so they have no compensated status.
COMPENSATED_STATUS: Final[Mapping[Kind, str]] = {"access": "revoked", "booking": "cancelled"}
RECORD_PREFIX: Final[Mapping[Kind, str]] = {"access": "acc", "booking": "bkg", "transfer": "trf"}

RESOURCE_PATTERN: Final = r"^[a-z][a-z0-9_-]{0,63}$"
RESOURCE_RE: Final = re.compile(RESOURCE_PATTERN)
PRINCIPAL_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,64}$"
CURRENCY_PATTERN: Final = r"^[A-Z]{3}$"
DATE_PATTERN: Final = r"^\d{4}-\d{2}-\d{2}$"
TIME_PATTERN: Final = r"^([01]\d|2[0-3]):[0-5]\d$"
IDEMPOTENCY_KEY_RE: Final = re.compile(r"^[\x21-\x7e]{1,255}$")
BUSINESS_CODE_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_LATENCY_MS: Final = 600_000.0

Principal = Annotated[str, msgspec.Meta(pattern=PRINCIPAL_PATTERN)]
Reference = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class InvalidRequestError(Exception):
    """A request the provider refuses before doing anything (never stored under a key)."""

    def __init__(self, status: int, slug: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.title = title
        self.detail = detail


def invalid_resource(field_name: str, value: str) -> InvalidRequestError:
    return InvalidRequestError(
        400,
        "invalid-resource",
        "Invalid resource name",
        f"{field_name} {value!r} does not match {RESOURCE_PATTERN}",
    )


def validation_error(detail: str) -> InvalidRequestError:
    return InvalidRequestError(422, "validation-error", "Request body failed validation", detail)


# ---------------------------------------------------------------------------- bodies


class AccessBody(msgspec.Struct, frozen=True):
    tenant_id: Principal
    user_id: Principal
    resource: Name
    reference: Reference | None = None


class BookingBody(msgspec.Struct, frozen=True):
    tenant_id: Principal
    user_id: Principal
    restaurant: Name
    date: Annotated[str, msgspec.Meta(pattern=DATE_PATTERN)]
    time: Annotated[str, msgspec.Meta(pattern=TIME_PATTERN)]
    party_size: Annotated[int, msgspec.Meta(ge=1, le=50)]
    reference: Reference | None = None


class TransferBody(msgspec.Struct, frozen=True):
    tenant_id: Principal
    user_id: Principal
    from_account: Name
    to_account: Name
    amount_cents: Annotated[int, msgspec.Meta(gt=0, le=10**12)]
    currency: Annotated[str, msgspec.Meta(pattern=CURRENCY_PATTERN)]
    reference: Reference | None = None


class CompensateBody(msgspec.Struct, frozen=True):
    tenant_id: Principal
    user_id: Principal
    reference: Reference | None = None


class FaultBody(msgspec.Struct, frozen=True):
    match: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    latency_ms: Annotated[float, msgspec.Meta(ge=0, le=MAX_LATENCY_MS)] | None = None
    status: Annotated[int, msgspec.Meta(ge=400, le=599)] | None = None
    times: Annotated[int, msgspec.Meta(ge=1)] | None = None
    retry_after_s: Annotated[float, msgspec.Meta(ge=0, le=86_400)] | None = None
    timeout_after_commit: bool = False
    # The rule applies to the resource's reads (availability) instead of its mutations.
    reads: bool = False


_BODY_TYPES: Final[Mapping[Kind, type[AccessBody | BookingBody | TransferBody]]] = {
    "access": AccessBody,
    "booking": BookingBody,
    "transfer": TransferBody,
}


def decode_json(raw: bytes) -> object:
    """Parse JSON text; malformed input is a 400."""
    if not raw.strip():
        raise InvalidRequestError(
            400, "malformed-json", "Malformed JSON", "the request body is empty"
        )
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise InvalidRequestError(400, "malformed-json", "Malformed JSON", str(exc)) from exc


def convert(obj: object, body_type: type[_T]) -> _T:
    """Check a parsed JSON value against a body type; wrong or missing fields are a 422."""
    try:
        return msgspec.convert(obj, body_type)
    except msgspec.ValidationError as exc:
        raise validation_error(str(exc)) from exc


@dataclass(frozen=True, slots=True)
class CreateCommand:
    """A validated create request, reduced to what the provider stores."""

    kind: Kind
    tenant_id: str
    user_id: str
    reference: str | None
    resource: str
    details: dict[str, Any]
    canonical: dict[str, Any]


def parse_create(kind: Kind, obj: object) -> CreateCommand:
    body = convert(obj, _BODY_TYPES[kind])
    details: dict[str, Any]
    if isinstance(body, AccessBody):
        resource = body.resource
        if not RESOURCE_RE.match(resource):
            raise invalid_resource("resource", resource)
        details = {}
    elif isinstance(body, BookingBody):
        resource = body.restaurant
        if not RESOURCE_RE.match(resource):
            raise invalid_resource("restaurant", resource)
        try:
            dt.date.fromisoformat(body.date)
        except ValueError as exc:
            raise validation_error(f"date {body.date!r} is not a calendar date") from exc
        details = {
            "restaurant": body.restaurant,
            "date": body.date,
            "time": body.time,
            "party_size": body.party_size,
        }
    else:
        for name, value in (("from_account", body.from_account), ("to_account", body.to_account)):
            if not RESOURCE_RE.match(value):
                raise invalid_resource(name, value)
        if body.from_account == body.to_account:
            raise validation_error("from_account and to_account must differ")
        resource = body.to_account
        details = {
            "from_account": body.from_account,
            "to_account": body.to_account,
            "amount_cents": body.amount_cents,
            "currency": body.currency,
        }
    return CreateCommand(
        kind=kind,
        tenant_id=body.tenant_id,
        user_id=body.user_id,
        reference=body.reference,
        resource=resource,
        details=details,
        canonical=msgspec.to_builtins(body),
    )


def parse_resource_query(name: str, value: str | None) -> str:
    if value is None or not value:
        raise validation_error(f"query parameter {name!r} is required")
    if not RESOURCE_RE.match(value):
        raise invalid_resource(name, value)
    return value


def parse_date_query(value: str | None) -> str:
    if value is None or not re.match(DATE_PATTERN, value):
        raise validation_error("query parameter 'date' must be YYYY-MM-DD")
    try:
        dt.date.fromisoformat(value)
    except ValueError as exc:
        raise validation_error(f"date {value!r} is not a calendar date") from exc
    return value


def optional_idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not IDEMPOTENCY_KEY_RE.match(value):
        raise InvalidRequestError(
            400,
            "invalid-idempotency-key",
            "Invalid Idempotency-Key",
            "Idempotency-Key must be 1-255 printable ASCII characters without spaces",
        )
    return value


def require_idempotency_key(value: str | None) -> str:
    key = optional_idempotency_key(value)
    if key is None:
        raise InvalidRequestError(
            400,
            "missing-idempotency-key",
            "Idempotency-Key header required",
            "mutating requests must carry an Idempotency-Key header",
        )
    return key


# ---------------------------------------------------------------------------- idempotency


def fingerprint(scope: Scope, payload: Mapping[str, Any]) -> str:
    """Hash of the canonical request: key order and whitespace do not matter."""
    canonical = json.dumps(
        {"scope": scope, "payload": payload}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class Decision(enum.Enum):
    PROCEED = "proceed"  # first time: the caller now owns the key
    REPLAY = "replay"  # finished before: answer with the stored response
    MISMATCH = "mismatch"  # same key, different request
    IN_FLIGHT = "in_flight"  # same request still running


@dataclass(frozen=True, slots=True)
class StoredKey:
    fingerprint: str
    in_flight: bool
    status_code: int | None
    response: bytes | None
    record_id: str | None


def decide(existing: StoredKey | None, request_fingerprint: str) -> Decision:
    if existing is None:
        return Decision.PROCEED
    # A different body is a caller bug whether or not the first one finished.
    if existing.fingerprint != request_fingerprint:
        return Decision.MISMATCH
    if existing.in_flight:
        return Decision.IN_FLIGHT
    return Decision.REPLAY


def ledger_key(idempotency_key: str | None, reference: str | None, record_id: str) -> str:
    """Key under which an effect is counted when the key may be absent (ignore mode)."""
    return idempotency_key or reference or record_id


# ---------------------------------------------------------------------------- faults


@dataclass(frozen=True, slots=True)
class FaultEffect:
    """What failure injection does to one request; all fields unset means nothing."""

    latency_ms: float | None = None
    status: int | None = None
    retry_after_s: float | None = None
    timeout_after_commit: bool = False

    @property
    def empty(self) -> bool:
        return (
            self.latency_ms is None
            and self.status is None
            and self.retry_after_s is None
            and not self.timeout_after_commit
        )


@dataclass(slots=True)
class FaultRule:
    """A fault registered through /admin/faults; ``remaining`` None means until cleared."""

    fault_id: str
    match: str
    effect: FaultEffect
    remaining: int | None
    hits: int = 0
    reads: bool = False

    def active(self) -> bool:
        return self.remaining is None or self.remaining > 0

    def matches(self, resource: str) -> bool:
        return self.active() and fault_matches(self.match, resource)

    def view(self) -> dict[str, Any]:
        return {
            "fault_id": self.fault_id,
            "match": self.match,
            "latency_ms": self.effect.latency_ms,
            "status": self.effect.status,
            "retry_after_s": self.effect.retry_after_s,
            "timeout_after_commit": self.effect.timeout_after_commit,
            "times": self.remaining,
            "reads": self.reads,
            "hits": self.hits,
            "active": self.active(),
        }


def fault_matches(pattern: str, resource: str) -> bool:
    # Case-sensitive on purpose: resource names are lowercase by contract.
    return fnmatch.fnmatchcase(resource, pattern)


def merge_effects(effects: Iterable[FaultEffect]) -> FaultEffect:
    """Combine effects in priority order: for each field the first one that sets it wins."""
    latency: float | None = None
    status: int | None = None
    retry_after: float | None = None
    hang = False
    for effect in effects:
        if latency is None:
            latency = effect.latency_ms
        if status is None:
            status = effect.status
        if retry_after is None:
            retry_after = effect.retry_after_s
        hang = hang or effect.timeout_after_commit
    return FaultEffect(latency, status, retry_after, hang)


def _header_number(headers: Mapping[str, str], name: str, upper: float) -> float | None:
    raw = headers.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= upper:  # also rejects NaN
        raise InvalidRequestError(
            400, "invalid-fault-header", "Invalid fault header", f"{name} must be in 0..{upper:g}"
        )
    return value


def header_fault(headers: Mapping[str, str]) -> FaultEffect:
    """The fault a request asks for through X-Sandbox-Fault-* headers (case-insensitive map)."""
    status: int | None = None
    raw_status = headers.get("x-sandbox-fault-status")
    if raw_status is not None:
        if not raw_status.strip().isdigit() or not 400 <= int(raw_status) <= 599:
            raise InvalidRequestError(
                400,
                "invalid-fault-header",
                "Invalid fault header",
                "X-Sandbox-Fault-Status must be an HTTP status in 400..599",
            )
        status = int(raw_status)
    return FaultEffect(
        latency_ms=_header_number(headers, "x-sandbox-fault-latency-ms", MAX_LATENCY_MS),
        status=status,
        retry_after_s=_header_number(headers, "x-sandbox-fault-retry-after", 86_400),
        timeout_after_commit=header_flag(headers, "x-sandbox-fault-timeout-after-commit"),
    )


def header_flag(headers: Mapping[str, str], name: str) -> bool:
    return headers.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def business_error_code(headers: Mapping[str, str]) -> str | None:
    raw = headers.get("x-sandbox-business-error")
    if raw is None:
        return None
    code = raw.strip()
    if not BUSINESS_CODE_RE.match(code):
        raise InvalidRequestError(
            400,
            "invalid-fault-header",
            "Invalid fault header",
            f"X-Sandbox-Business-Error must match {BUSINESS_CODE_RE.pattern}",
        )
    return code


# ---------------------------------------------------------------------------- records


def new_record_id(kind: Kind) -> str:
    return f"{RECORD_PREFIX[kind]}_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True, slots=True)
class Record:
    id: str
    kind: Kind
    status: str
    tenant_id: str
    user_id: str
    resource: str
    reference: str | None
    idempotency_key: str | None
    details: dict[str, Any]
    is_async: bool
    callback_twice: bool
    commit_due: float | None
    created_at: str
    updated_at: str
    committed_at: str | None = None
    compensated_at: str | None = None

    @property
    def pending(self) -> bool:
        return self.status == PENDING

    def view(self) -> dict[str, Any]:
        """The public JSON shape of a record."""
        return {
            "id": self.id,
            "kind": self.kind,
            "status": self.status,
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "resource": self.resource,
            "reference": self.reference,
            "idempotency_key": self.idempotency_key,
            **self.details,
            "async": self.is_async,
            # True once the effect really happened, even if it was later compensated.
            "committed": self.committed_at is not None,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "committed_at": self.committed_at,
            "compensated_at": self.compensated_at,
        }


def new_record(
    command: CreateCommand,
    *,
    record_id: str,
    idempotency_key: str | None,
    now_iso: str,
    commit_due: float | None,
    callback_twice: bool,
) -> Record:
    """A record as created: committed at once, or pending until ``commit_due``."""
    is_async = commit_due is not None
    return Record(
        id=record_id,
        kind=command.kind,
        status=PENDING if is_async else COMMITTED_STATUS[command.kind],
        tenant_id=command.tenant_id,
        user_id=command.user_id,
        resource=command.resource,
        reference=command.reference,
        idempotency_key=idempotency_key,
        details=command.details,
        is_async=is_async,
        callback_twice=callback_twice,
        commit_due=commit_due,
        created_at=now_iso,
        updated_at=now_iso,
        committed_at=None if is_async else now_iso,
    )


def commit_pending(record: Record, now_iso: str) -> Record | None:
    """The committed record, or None when it is no longer pending (cancelled first)."""
    if not record.pending:
        return None
    return replace(
        record,
        status=COMMITTED_STATUS[record.kind],
        commit_due=None,
        committed_at=now_iso,
        updated_at=now_iso,
    )


@dataclass(frozen=True, slots=True)
class Compensation:
    record: Record
    changed: bool
    was_pending: bool  # the effect never happened: the async completion reports this


def compensate(record: Record, now_iso: str) -> Compensation:
    """Revoke/cancel; compensating twice is a no-op, not an error."""
    target = COMPENSATED_STATUS[record.kind]
    if record.status == target:
        return Compensation(record, changed=False, was_pending=False)
    updated = replace(
        record, status=target, commit_due=None, compensated_at=now_iso, updated_at=now_iso
    )
    return Compensation(updated, changed=True, was_pending=record.pending)


def callback_payload(callback_id: str, record: Record) -> dict[str, Any]:
    return {
        "callback_id": callback_id,
        "record_id": record.id,
        "kind": record.kind,
        "key": record.idempotency_key,
        "reference": record.reference,
        "status": record.status,
        "resource": record.resource,
        "record": record.view(),
    }


# ---------------------------------------------------------------------------- availability

_SLOTS: Final = tuple(f"{hour:02d}:{minute:02d}" for hour in range(12, 23) for minute in (0, 30))


def free_slots(restaurant: str, date: str) -> list[str]:
    """Deterministic free slots: the same question always gets the same answer."""
    free: list[str] = []
    for slot in _SLOTS:
        digest = hashlib.sha256(f"{restaurant}|{date}|{slot}".encode()).digest()
        if digest[0] % 4 != 0:
            free.append(slot)
    return free
