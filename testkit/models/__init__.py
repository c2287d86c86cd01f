"""Fake model servers and turn builders shared by the unit and system model tests."""
