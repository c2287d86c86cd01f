"""The sandbox provider's records (pure): kinds, statuses, creation, the async commit,
compensation, the callback payload and deterministic availability. No I/O, no clock."""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

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


def iso_at(timestamp: float) -> str:
    """A clock reading as the ISO time records carry (UTC, milliseconds)."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).isoformat(timespec="milliseconds")


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


def compensate_record(record: Record, now_iso: str) -> Compensation:
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


# -- availability -----------------------------------------------------------------------

_SLOTS: Final = tuple(f"{hour:02d}:{minute:02d}" for hour in range(12, 23) for minute in (0, 30))


def free_slots(restaurant: str, date: str) -> list[str]:
    """Deterministic free slots: the same question always gets the same answer."""
    free: list[str] = []
    for slot in _SLOTS:
        digest = hashlib.sha256(f"{restaurant}|{date}|{slot}".encode()).digest()
        if digest[0] % 4 != 0:
            free.append(slot)
    return free
