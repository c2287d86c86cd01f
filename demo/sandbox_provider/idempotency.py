"""Idempotency keys (pure): the request's fingerprint, what a reused key means, and the
ledger key an effect is counted under."""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .records import Scope


def fingerprint(scope: Scope, payload: Mapping[str, Any]) -> str:
    """Hash of the canonical request: key order and whitespace do not matter."""
    canonical = json.dumps(
        {"scope": scope, "payload": payload}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class KeyDecision(enum.Enum):
    """What a request with an Idempotency-Key does, given what the key already holds."""

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


def decide_idempotency_key(
    existing: StoredKey | None, request_fingerprint: str
) -> KeyDecision:
    """Proceed, replay, or refuse a request by what its key already holds."""
    if existing is None:
        return KeyDecision.PROCEED
    # A different body is a caller bug whether or not the first one finished.
    if existing.fingerprint != request_fingerprint:
        return KeyDecision.MISMATCH
    if existing.in_flight:
        return KeyDecision.IN_FLIGHT
    return KeyDecision.REPLAY


def ledger_key(idempotency_key: str | None, reference: str | None, record_id: str) -> str:
    """Key under which an effect is counted when the key may be absent (ignore mode)."""
    return idempotency_key or reference or record_id
