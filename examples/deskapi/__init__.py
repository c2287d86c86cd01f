"""A small help-desk API with real side effects: the system of record of the examples.

It is what a user's own API looks like to holdline, and it differs from the sandbox on
purpose: its idempotency header is `X-Request-Token`; a token reused with another body is a
409; a request still in flight under the same token is a 425 with Retry-After; refunds and
payouts complete later (202, then a signed webhook, possibly twice); `GET /ledger` counts
the real effects per token. `/admin/faults` injects failures for tests and demos.
"""
