"""Typed async client for holdline's Agent API (DESIGN §6b)."""
