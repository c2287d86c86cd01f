"""Failure injection rules (pure): the admin fault body, a fault's effect, matching a
resource, merging effects, and the per-request X-Sandbox-* headers."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final

import msgspec

from .validation import InvalidRequestError

BUSINESS_CODE_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_LATENCY_MS: Final = 600_000.0


class FaultBody(msgspec.Struct, frozen=True):
    match: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    latency_ms: Annotated[float, msgspec.Meta(ge=0, le=MAX_LATENCY_MS)] | None = None
    status: Annotated[int, msgspec.Meta(ge=400, le=599)] | None = None
    times: Annotated[int, msgspec.Meta(ge=1)] | None = None
    retry_after_s: Annotated[float, msgspec.Meta(ge=0, le=86_400)] | None = None
    timeout_after_commit: bool = False
    # The rule applies to the resource's reads (availability) instead of its mutations.
    reads: bool = False


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
