"""Prometheus measures of the sandbox provider, on a registry private to one app.

Every labelled family is pre-populated so it is visible from start-up, before first use.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from .records import KINDS

REQUEST_KINDS: Final = (
    "access",
    "access_revoke",
    "booking",
    "booking_cancel",
    "transfer",
    "availability",
    "lookup",
    "record",
    "ledger",
    "admin",
)
OUTCOMES: Final = (
    "created",
    "accepted",
    "compensated",
    "replayed",
    "mismatch",
    "in_flight",
    "fault",
    "business_error",
    "invalid",
    "not_found",
    "ok",
    "error",
)
CALLBACK_OUTCOMES: Final = ("delivered", "retry", "failed")


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.effects = Counter(
            "holdline_sandbox_effects_total",
            "Real side effects committed by the sandbox provider.",
            ["kind"],
            registry=self.registry,
        )
        # The truthfulness measure of docs/contract.md §9, where the truth is: the ledger
        # knows each effect's key even when idempotency is not honoured, so a second effect
        # for one key counts.
        self.duplicate_effects = Counter(
            "holdline_duplicate_side_effects",
            "Side effects beyond the first for one idempotency key (the ledger's duplicates).",
            ["kind"],
            registry=self.registry,
        )
        self.requests = Counter(
            "holdline_sandbox_requests_total",
            "Requests handled by the sandbox provider, by endpoint kind and outcome.",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self.callbacks = Counter(
            "holdline_sandbox_callbacks_total",
            "Async completion callback delivery attempts, by outcome.",
            ["outcome"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "holdline_sandbox_request_seconds",
            "Time to answer a request, injected latency and hangs included.",
            ["kind"],
            registry=self.registry,
        )
        for kind in KINDS:
            self.effects.labels(kind)
            self.duplicate_effects.labels(kind)
        for request_kind in REQUEST_KINDS:
            self.request_seconds.labels(request_kind)
            for outcome in OUTCOMES:
                self.requests.labels(request_kind, outcome)
        for outcome in CALLBACK_OUTCOMES:
            self.callbacks.labels(outcome)
