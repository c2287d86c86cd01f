"""The short chaos run of `make test`: every fault kind at least once, then every invariant.

Its own broker (the run kills it), a fixed seed (HOLDLINE_CHAOS_SEED replays another one).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .faults import KINDS
from .harness import Config, run, table

SEED = int(os.environ.get("HOLDLINE_CHAOS_SEED", "7"))


@pytest.mark.chaos
@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_short_chaos_run_survives_every_fault_kind(tmp_path: Path) -> None:
    figures = await run(
        Config(
            seed=SEED,
            duration_s=55.0,
            root=tmp_path,
            session_loops=3,
            quiesce_s=40.0,
            gap_s=(1.0, 2.5),
        )
    )
    print(table(figures))
    assert figures["violations"] == 0, figures["violation_samples"]
    # Every kind was injected, and armed crash points did kill processes.
    assert set(figures["faults"]) == set(KINDS), figures["faults"]
    assert sum(figures["crash_points_fired"].values()) >= 1, figures
    assert figures["proxy"]["dropped"] >= 1
    # Real work went through: sessions, committed effects, closings that clients saw.
    assert figures["acknowledged"]["sessions"] >= 5
    assert figures["operations"].get("committed", 0) >= 10
    # One effect per committed intent (checked per operation by the end checks); a committed
    # compensation (an undo) adds none, and `compensations` counts them whatever their end.
    committed = figures["operations"]["committed"]
    assert committed - figures["compensations"] <= figures["effects"] <= committed
    assert figures["batches_settled"] == figures["batches"] >= 5
    assert figures["final_deliveries"] == figures["batches"]
    assert figures["snapshots_compared"] == figures["acknowledged"]["sessions"]
