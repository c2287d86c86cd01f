"""Sandbox provider: a real HTTP system of record for the demo tools.

Plane: system of record (see services/README.md).

Accesses, bookings and transfers with Idempotency-Key semantics, an effect ledger that
counts real side effects per key, async completion with signed callbacks and failure
injection. See ``settings`` for its environment and ``handlers`` for its routes.
"""
