"""The folds' copy-with-changes builds what `dataclasses.replace` builds and refuses the same."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from libs.domain import OperationState, OpStatus
from libs.domain.evolving import evolved


def _state() -> OperationState:
    return OperationState(
        operation_id="op-1", session_id="s-1", status=OpStatus.ADMITTED, tool="grant",
        arguments={"resource": "r"}, admitted_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_a_copy_with_changes_equals_replace_and_leaves_the_original() -> None:
    state = _state()
    changes = {"status": OpStatus.COMMITTED, "version": 4, "result": {"ok": True}}
    copied = evolved(state, **changes)
    assert copied == dataclasses.replace(state, **changes)  # type: ignore[arg-type]
    assert copied is not state
    assert state.status is OpStatus.ADMITTED
    assert state.version == 0


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(TypeError, match="no field 'statuss'"):
        evolved(_state(), statuss=OpStatus.COMMITTED)


def test_a_class_with_post_init_is_left_to_replace() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("negative")

    with pytest.raises(TypeError, match=r"needs dataclasses\.replace"):
        evolved(Checked(1), n=-1)
