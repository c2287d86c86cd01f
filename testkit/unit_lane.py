"""The unit lane's rules: everything under tests/unit is `fast`, and none of it may start a
broker or a service (a test that needs one belongs in tests/component or tests/system)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

REFUSAL = (
    "a unit test starts no broker and no service process: "
    "move it to tests/component (one service) or tests/system (the whole stack)"
)


class UnitLaneViolation(RuntimeError):
    """A test under tests/unit tried to start a broker or a service process."""


def refuse(*_args: object, **_kwargs: object) -> NoReturn:
    """What starting a broker or a service does in the unit lane."""
    raise UnitLaneViolation(REFUSAL)


def mark_fast(items: list[pytest.Item], root: Path) -> int:
    """Mark every collected test under `root` `fast`; how many there are."""
    count = 0
    for item in items:
        if item.path.is_relative_to(root):
            item.add_marker(pytest.mark.fast)
            count += 1
    return count


def ran(terminal: pytest.TerminalReporter, root: Path) -> int:
    """How many tests under `root` ran to a verdict (passed, failed, xfailed, xpassed)."""
    prefix = root.relative_to(terminal.config.rootpath).as_posix() + "/"
    return sum(
        1
        for outcome in ("passed", "failed", "xfailed", "xpassed")
        for report in terminal.stats.get(outcome, [])
        if getattr(report, "when", "call") == "call"
        and str(getattr(report, "nodeid", "")).startswith(prefix)
    )
