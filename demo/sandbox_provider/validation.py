"""Validation of the sandbox provider's requests (pure): bodies, queries and the
Idempotency-Key header. A refused request raises `InvalidRequestError` before anything runs
and is never stored under a key."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from typing import Annotated, Any, Final, TypeVar

import msgspec

from .records import CreateCommand, Kind

_T = TypeVar("_T")

RESOURCE_PATTERN: Final = r"^[a-z][a-z0-9_-]{0,63}$"
RESOURCE_RE: Final = re.compile(RESOURCE_PATTERN)
PRINCIPAL_PATTERN: Final = r"^[A-Za-z0-9_.-]{1,64}$"
CURRENCY_PATTERN: Final = r"^[A-Z]{3}$"
DATE_PATTERN: Final = r"^\d{4}-\d{2}-\d{2}$"
TIME_PATTERN: Final = r"^([01]\d|2[0-3]):[0-5]\d$"
IDEMPOTENCY_KEY_RE: Final = re.compile(r"^[\x21-\x7e]{1,255}$")

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
