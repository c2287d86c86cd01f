"""The worker's settings: the work batch read from the environment, refused unless a count."""

from __future__ import annotations

import pytest

from services.operation_worker.settings import DEFAULT_WORK_BATCH, Settings


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("0", "must be 1 or more, got 0"),
        ("-4", "must be 1 or more, got -4"),
        ("many", "must be an integer, got 'many'"),
        ("2.5", "must be an integer, got '2.5'"),
    ],
)
def test_a_work_batch_that_is_no_count_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str, reason: str
) -> None:
    monkeypatch.setenv("HOLDLINE_WORK_BATCH", value)
    with pytest.raises(ValueError, match=f"^HOLDLINE_WORK_BATCH {reason}$"):
        Settings.from_env()


def test_the_work_batch_is_read_with_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOLDLINE_WORK_BATCH", raising=False)
    assert Settings.from_env().work_batch == DEFAULT_WORK_BATCH
    monkeypatch.setenv("HOLDLINE_WORK_BATCH", "7")
    assert Settings.from_env().work_batch == 7
