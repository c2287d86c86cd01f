"""The collector's settings for a long-running service process.

Measured under 50 paced chat sessions (a `gc.callbacks` probe in every service, collections
inside the 31 s paced span): unfrozen, the surface ran two full (generation 2) collections
of 64 and 145 ms, each walking every object the imports left behind (FastAPI, pydantic,
nats-py, msgspec), and a pause that long is the acceptance tail. Freezing what exists once
the app is built moves those objects out of the collector's sight (`gc.freeze`): in the same
span the surface's one full collection took 34 ms and the other services had none. What the
views allocate after the freeze (every event of every session) is kept out of the collector's
sight by the events themselves: they are `gc=False` structs (libs/events/__init__.py).
"""

from __future__ import annotations

import gc

from libs.config import HeapSettings


def settle(settings: HeapSettings) -> None:
    """Apply the settings: called once, after the app is built and before it serves."""
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(1, settings.gen0_threshold), gen1, gen2)
    if settings.freeze:
        # Collect first so garbage from start-up is not frozen with the live objects.
        gc.collect()
        gc.freeze()
