"""A call's control events go through the one write path onto the session's control subject."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from libs.bus import MemoryEventStore, Repository, Topology
from libs.clock import ManualClock, SequentialIds
from libs.events import CONTROL, Backchannel, BargeIn
from services.interaction_surface.voice.control_log import ControlLog, control_aggregate

pytestmark = pytest.mark.fast


def _published() -> float:
    value = REGISTRY.get_sample_value("holdline_events_published_total", {"stream": "control"})
    return value or 0.0


def _log(store: MemoryEventStore, clock: ManualClock) -> ControlLog:
    topology = Topology("hl")
    ids = SequentialIds()
    repository = Repository(store, control_aggregate(topology), clock=clock, ids=ids)
    return ControlLog(repository, topology, clock=clock, ids=ids)


async def test_control_events_are_stamped_and_stored_on_the_sessions_control_subject() -> None:
    store, clock = MemoryEventStore(), ManualClock()
    log = _log(store, clock)
    before = _published()
    await log.append("s1", BargeIn(played_ms=800, unheard_ms=1200), playback_id="p1",
                     response_id="r1")
    await log.append("s1", Backchannel(text="mm-hmm", continued=True))
    await log.append("s2", BargeIn(played_ms=1, unheard_ms=2))
    read = await store.read_subject("memory", "hl.control.s1.control", CONTROL)
    envelopes = [item.envelope for item in read.items]
    assert [type(e.event) for e in envelopes] == [BargeIn, Backchannel]
    first = envelopes[0]
    assert (first.session_id, first.playback_id, first.response_id) == ("s1", "p1", "r1")
    assert first.occurred_at == clock.now()
    assert len({e.event_id for e in envelopes}) == 2
    # Counted under the control stream, as the bare append was.
    assert _published() == before + 3
    # Nothing of another session's lands on this one's subject.
    other = await store.read_subject("memory", "hl.control.s2.control", CONTROL)
    assert len(other.items) == 1
