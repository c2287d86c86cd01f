"""Named crash points, armed by environment variable, for deterministic kill tests.

`HOLDLINE_CRASH_POINTS=worker.after_provider_commit` makes the process SIGKILL itself the
first time it reaches that point, exactly as `kill -9` would at that instant. Unarmed, a
crash point is a dictionary lookup. Pause points (`HOLDLINE_PAUSE_POINTS=name=seconds`)
hold a task there instead, so a test can see what others observe meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal

# The one environment read outside a settings module, on purpose: a test fault hook, armed
# in a child's environment and read at import, so no service threads it through its
# settings and a point fires wherever it sits (even before the settings exist).
_ARMED = frozenset(
    p.strip() for p in os.environ.get("HOLDLINE_CRASH_POINTS", "").split(",") if p.strip()
)

# Every point the code declares, so tests and docs can list them.
POINTS = {
    "worker.after_provider_commit": "the provider answered success; the event is not written",
    "worker.after_started": "operation.started is written; the provider was not called",
    "worker.after_attempt_recorded": (
        "an unsuccessful attempt's operation.attempted is written; what it decides is not"
    ),
    "coordinator.after_claim": "the final delivery key is claimed; delivery.ready is not written",
    "coordinator.after_ready": "delivery.ready is written; batch.drained is not",
    "coordinator.after_drained": "batch.drained is written; the message is not acknowledged",
}


# Where a task may be held for a while, by name (never chosen by the chaos run, which
# kills): `surface.before_turn_recorded`, a chat turn answered, its turn.replied not written;
# `policy.before_decision_recorded`, a delivery decided on the policy's view, not appended.
_PAUSED = {
    name.strip(): float(seconds)
    for name, _, seconds in (
        p.partition("=") for p in os.environ.get("HOLDLINE_PAUSE_POINTS", "").split(",")
    )
    if name.strip() and seconds
}


async def pause_point(name: str) -> None:
    """Wait here for the armed number of seconds, if this point is armed."""
    seconds = _PAUSED.get(name)
    if seconds:
        await asyncio.sleep(seconds)


def crash_point(name: str) -> None:
    """Die here, without cleanup, if this point is armed."""
    if name in _ARMED:
        os.kill(os.getpid(), signal.SIGKILL)
