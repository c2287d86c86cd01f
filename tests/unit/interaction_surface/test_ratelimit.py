"""The rate limiter's buckets on a hand-driven clock."""

from __future__ import annotations

import pytest

from services.interaction_surface.core.ratelimit import RateLimited, RateLimiter


def test_buckets_refill_with_time_and_a_refusal_takes_no_token() -> None:
    now = [0.0]
    limiter = RateLimiter(session=(2, 1), tenant=(3, 0.5), clock=lambda: now[0])
    limiter.admit("s1", "t")
    limiter.admit("s1", "t")
    with pytest.raises(RateLimited) as session_dry:
        limiter.admit("s1", "t")
    assert (session_dry.value.scope, session_dry.value.retry_after) == ("session", 1)
    limiter.admit("s2", "t")
    # The tenant is dry now; s3's refusal leaves s3's own bucket full.
    with pytest.raises(RateLimited) as tenant_dry:
        limiter.admit("s3", "t")
    assert (tenant_dry.value.scope, tenant_dry.value.retry_after) == ("tenant", 2)
    assert limiter.session.wait_s("s3") == 0.0
    limiter.admit("s4", "other")
    now[0] = 2.0
    limiter.admit("s3", "t")
    with pytest.raises(RateLimited):
        limiter.admit("s3", "t")
    unlimited = RateLimiter(session=(0, 0), tenant=(0, 0), clock=lambda: now[0])
    for _ in range(1000):
        unlimited.admit("s", "t")
    assert unlimited.session.unlimited


def test_openings_are_limited_per_address_and_per_tenant_apart() -> None:
    now = [0.0]
    limiter = RateLimiter(
        session=(0, 0), tenant=(0, 0), clock=lambda: now[0],
        open_tenant=(2, 1), open_address=(3, 1),
    )
    for _ in range(3):
        limiter.admit_address("203.0.113.7")
    with pytest.raises(RateLimited) as address_dry:
        limiter.admit_address("203.0.113.7")
    assert address_dry.value.scope == "address"
    # Another address has its own bucket; a tenant's openings are counted on their own.
    limiter.admit_address("203.0.113.8")
    limiter.admit_open("acme")
    limiter.admit_open("acme")
    with pytest.raises(RateLimited) as tenant_dry:
        limiter.admit_open("acme")
    assert (tenant_dry.value.scope, tenant_dry.value.retry_after) == ("tenant", 1)
    limiter.admit_open("globex")
    now[0] = 1.0
    limiter.admit_open("acme")
    limiter.admit_address("203.0.113.7")
