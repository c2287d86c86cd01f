"""Token buckets, in memory: session writes (one per session and one per tenant, HTTP
routes and agent WebSocket frames and connects alike) and session openings (one per tenant
and one per client address).

A request takes one token from each of its buckets, or from none: a refused request leaves
them as they were, and it is refused before anything is appended, so a 429 never
half-writes. The buckets live in the surface process; with several
surface processes each enforces the limit on the traffic it serves.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

# Buckets idle long enough to be full again are forgotten once there are this many.
_SWEEP_AT = 10_000


@dataclass
class _Bucket:
    tokens: float
    at: float


class Bucket:
    """Keyed token buckets of one size and refill rate (burst 0 = unlimited)."""

    def __init__(self, burst: float, per_second: float, clock: Callable[[], float]) -> None:
        self.burst = burst
        self.per_second = per_second
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    @property
    def unlimited(self) -> bool:
        """Whether this limit is switched off."""
        return self.burst <= 0

    def _current(self, key: str, now: float) -> _Bucket:
        found = self._buckets.get(key)
        if found is None:
            if len(self._buckets) >= _SWEEP_AT:
                self._sweep(now)
            found = self._buckets[key] = _Bucket(self.burst, now)
        found.tokens = min(self.burst, found.tokens + (now - found.at) * self.per_second)
        found.at = now
        return found

    def wait_s(self, key: str) -> float:
        """Seconds until one token is available (0 when one is available now)."""
        if self.unlimited:
            return 0.0
        found = self._current(key, self._clock())
        if found.tokens >= 1.0:
            return 0.0
        return (1.0 - found.tokens) / self.per_second

    def take(self, key: str) -> None:
        """Take one token (the caller checked `wait_s` first)."""
        if not self.unlimited:
            self._current(key, self._clock()).tokens -= 1.0

    def _sweep(self, now: float) -> None:
        full_after = self.burst / self.per_second
        for key in [k for k, b in self._buckets.items() if now - b.at >= full_after]:
            del self._buckets[key]


class RateLimited(Exception):
    """Over a limit: retry after `retry_after_s`."""

    def __init__(self, scope: str, retry_after_s: float) -> None:
        super().__init__(f"{scope} rate limit exceeded")
        self.scope = scope
        self.retry_after_s = retry_after_s

    @property
    def retry_after(self) -> int:
        """Whole seconds for the `Retry-After` header (at least 1)."""
        return max(1, math.ceil(self.retry_after_s))


def _take_one(scope: str, bucket: Bucket, key: str) -> None:
    wait = bucket.wait_s(key)
    if wait > 0:
        raise RateLimited(scope, wait)
    bucket.take(key)


def _take_both(first: tuple[str, Bucket, str], second: tuple[str, Bucket, str]) -> None:
    """One token from each bucket, or RateLimited (named by the first refusing) and none."""
    for scope, bucket, key in (first, second):
        wait = bucket.wait_s(key)
        if wait > 0:
            raise RateLimited(scope, wait)
    for _scope, bucket, key in (first, second):
        bucket.take(key)


class RateLimiter:
    """Per-session and per-tenant write limits, per-tenant and per-address opening limits;
    each pair taken together or not at all."""

    def __init__(
        self,
        session: tuple[float, float],
        tenant: tuple[float, float],
        clock: Callable[[], float] = time.monotonic,
        *,
        open_tenant: tuple[float, float] = (0.0, 0.0),
        open_address: tuple[float, float] = (0.0, 0.0),
    ) -> None:
        self.session = Bucket(*session, clock)
        self.tenant = Bucket(*tenant, clock)
        self.open_tenant = Bucket(*open_tenant, clock)
        self.open_address = Bucket(*open_address, clock)

    def admit(self, session_id: str, tenant_id: str) -> None:
        """Take a token from both write buckets, or raise RateLimited and take none."""
        _take_both(("session", self.session, session_id), ("tenant", self.tenant, tenant_id))

    def admit_address(self, address: str) -> None:
        """Take a token of a client address's unauthenticated requests (session openings,
        refused ones included), or raise RateLimited."""
        _take_one("address", self.open_address, address)

    def admit_open(self, tenant_id: str) -> None:
        """Take a token of a tenant's session openings, or raise RateLimited."""
        _take_one("tenant", self.open_tenant, tenant_id)
