"""Tracing is switched on by an OTLP endpoint alone."""

from __future__ import annotations

import pytest

from libs import tracing


def test_an_otlp_endpoint_turns_tracing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing listens there: the batch processor exports in the background and gives up.
    monkeypatch.setenv(tracing.ENDPOINT_VARIABLE, "http://127.0.0.1:9")
    try:
        assert tracing.configure("operation-worker")
        assert tracing.enabled()
    finally:
        tracing.disable()
