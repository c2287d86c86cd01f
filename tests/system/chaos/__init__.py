"""Chaos harness: the real processes under seeded kills, pauses, broker and network faults."""
