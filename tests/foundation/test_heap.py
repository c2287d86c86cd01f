"""The collector settings every service applies before it serves (`libs.heap`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from libs.config import HeapSettings

_PROBE = """
import gc, json, sys
from libs.config import HeapSettings
from libs.heap import settle
settle(HeapSettings.from_env())
print(json.dumps({"frozen": gc.get_freeze_count(), "threshold": gc.get_threshold()}))
"""


def _probe(env: dict[str, str]) -> dict[str, object]:
    # A child process: freezing the test runner's own heap would outlive the test.
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**os.environ, **env}, capture_output=True, text=True, check=True, timeout=60,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_by_default_the_start_up_heap_is_frozen_and_young_collections_keep_their_size() -> None:
    found = _probe({"HOLDLINE_GC_FREEZE": "", "HOLDLINE_GC_GEN0": ""})
    assert isinstance(found["frozen"], int)
    # Every module the probe imported is out of the collector's sight.
    assert found["frozen"] > 10_000
    assert found["threshold"][0] == 700  # type: ignore[index]


def test_freezing_can_be_turned_off_and_the_young_threshold_set() -> None:
    found = _probe({"HOLDLINE_GC_FREEZE": "0", "HOLDLINE_GC_GEN0": "5000"})
    assert found["frozen"] == 0
    assert found["threshold"][0] == 5000  # type: ignore[index]


def test_a_bad_threshold_is_refused_with_its_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLDLINE_GC_GEN0", "many")
    with pytest.raises(ValueError, match="HOLDLINE_GC_GEN0"):
        HeapSettings.from_env()
