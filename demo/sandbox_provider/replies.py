"""The provider's answers: a reply's status, body and headers, and the problem replies the
engine gives without committing anything (injected faults, replays of a stored answer)."""

from __future__ import annotations

import http
import math
from dataclasses import dataclass, field
from typing import Any

from .fault_rules import FaultEffect
from .problems import PROBLEM_MEDIA_TYPE, encode, problem_body

JSON_MEDIA_TYPE = "application/json"


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    outcome: str
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def media_type(self) -> str:
        return PROBLEM_MEDIA_TYPE if self.status >= 400 else JSON_MEDIA_TYPE


def problem_reply(
    status: int,
    slug: str,
    title: str,
    detail: str,
    outcome: str,
    *,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    body = encode(problem_body(status, slug, title, detail, extra))
    return Reply(status, body, outcome, headers or {})


def location(record_id: str | None) -> dict[str, str]:
    return {"Location": f"/v1/records/{record_id}"} if record_id else {}


def replayed(status: int | None, body: bytes | None, record_id: str | None) -> Reply:
    """The stored answer of a finished key, marked as a replay."""
    if status is None or body is None:
        raise RuntimeError("finished idempotency key without a stored response")
    headers = {"Idempotent-Replayed": "true", **location(record_id)}
    return Reply(status, body, "replayed", headers)


def injected_status(effect: FaultEffect) -> Reply:
    """The answer of an injected failure status: nothing was committed."""
    status = effect.status or 500
    headers: dict[str, str] = {}
    if effect.retry_after_s is not None and status in (429, 503):
        headers["Retry-After"] = str(math.ceil(effect.retry_after_s))
    try:
        title = http.HTTPStatus(status).phrase
    except ValueError:
        title = "Injected failure"
    return problem_reply(
        status,
        "injected-fault",
        title,
        f"sandbox fault injection answered {status}; nothing was committed",
        "fault",
        headers=headers,
    )
