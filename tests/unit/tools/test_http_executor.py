"""The HTTP executor's pure parts: how answers are classified and webhooks verified."""

from __future__ import annotations

import hashlib
import hmac
import time
from email.utils import formatdate

import msgspec
import pytest
from multidict import CIMultiDict

from libs.tools import CallbackRefused, default_registry
from libs.tools.http import Callbacks, Endpoint, HttpExecutor, HttpSpec, retry_after_s
from libs.tools.templates import Template
from libs.tools.wire import AiohttpClient, Answer

SPEC = HttpSpec(
    execute=Endpoint("POST", Template("http://api/tickets"), "X-Request-Token"),
    retryable=frozenset({425, 429, 503}),
    callbacks=Callbacks(
        secret=b"s3cret",
        signature_header="X-Sig",
        timestamp_header="X-Ts",
        key_field="meta.token",
        result_field="data",
    ),
)
EXECUTOR = HttpExecutor(SPEC, AiohttpClient())


def _answer(status: int, body: dict[str, object] | None = None, **headers: str) -> Answer:
    return Answer(status, CIMultiDict(headers), msgspec.json.encode(body or {}))


def test_answers_are_classified_by_the_declared_statuses() -> None:
    assert EXECUTOR.classify(_answer(201, {"id": "T-1"}), 1.0).outcome == "success"
    accepted = EXECUTOR.classify(_answer(202, {"id": "R-1", "status": "pending"}), 1.0)
    assert (accepted.outcome, accepted.provider_ref) == ("accepted_async", "R-1")
    limited = EXECUTOR.classify(_answer(429, **{"Retry-After": "7"}), 1.0)
    assert (limited.outcome, limited.retry_after_s) == ("rate_limited", 7.0)
    assert EXECUTOR.classify(_answer(425), 1.0).outcome == "server_error"
    # Not declared retryable: a final answer, whatever its class.
    assert EXECUTOR.classify(_answer(500), 1.0).outcome == "business_error"
    assert EXECUTOR.classify(_answer(409, {"error": "reused"}), 1.0).detail == "HTTP 409 reused"


def test_retry_after_takes_seconds_or_a_date() -> None:
    now = time.time()
    assert retry_after_s("3", now=now) == 3.0
    when = retry_after_s(formatdate(now + 30, usegmt=True), now=now)
    assert when is not None
    assert 28 <= when <= 31
    assert retry_after_s("soon", now=now) is None


def _signed(body: bytes, stamp: int, secret: bytes = b"s3cret") -> dict[str, str]:
    digest = hmac.new(secret, str(stamp).encode() + b"." + body, hashlib.sha256).hexdigest()
    return {"X-Ts": str(stamp), "X-Sig": digest}


def test_webhooks_are_verified_then_read_at_the_declared_fields() -> None:
    body = b'{"meta": {"token": "op_1"}, "data": {"id": "R-1", "status": "settled"}}'
    now = time.time()
    parsed = EXECUTOR.parse_callback(_signed(body, int(now)), body, now=now)
    assert parsed.operation_id == "op_1"
    assert parsed.found.state == "committed"
    assert parsed.found.provider_ref == "R-1"
    for headers in (
        _signed(body, int(now), b"other"),
        _signed(body, int(now) - 3600),
        {"X-Ts": str(int(now))},
    ):
        with pytest.raises(CallbackRefused) as refused:
            EXECUTOR.parse_callback(headers, body, now=now)
        assert refused.value.status == 401
    missing = b'{"data": {"id": "R-1"}}'
    with pytest.raises(CallbackRefused) as unreadable:
        EXECUTOR.parse_callback(_signed(missing, int(now)), missing, now=now)
    assert unreadable.value.status == 400


def test_a_callback_route_completes_only_its_executors_tools() -> None:
    registry = default_registry(AiohttpClient())
    # Every sandbox executor answers the route the sandbox provider posts to.
    assert registry.completes("sandbox", "book_table")
    assert registry.completes("sandbox", "provision_access")
    assert registry.completes("sandbox.booking", "book_table")
    assert not registry.completes("sandbox.booking", "provision_access")
    assert not registry.completes("nobody", "book_table")
