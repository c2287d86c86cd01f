"""The collector settings every service applies before it serves (`libs.heap`)."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import typing

import msgspec
import pytest

from libs.config import HeapSettings
from libs.events import (
    BATCHES,
    INTERACTION,
    OPERATIONS,
    AttemptRecord,
    BatchDrained,
    BatchEvent,
    DeliveryEvent,
    Envelope,
    InteractionEvent,
    OperationCommitted,
    OperationEvent,
    RepliedOperation,
    SettledMember,
    TurnReplied,
)
from libs.events.codec import EventCodec
from services.interaction_surface.core.session_log import Entry
from testkit.events import envelope

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


_RETAINED = (Envelope, Entry, AttemptRecord, RepliedOperation, SettledMember)


@pytest.mark.parametrize(
    "kind",
    [
        *_RETAINED,
        *(
            kind
            for union in (OperationEvent, InteractionEvent, BatchEvent, DeliveryEvent)
            for kind in typing.get_args(union)
        ),
    ],
    ids=lambda kind: kind.__name__,
)
def test_every_event_and_its_envelope_is_out_of_the_collectors_sight(kind: type) -> None:
    # The views keep every event of every session; tracked, each would be walked by every
    # full collection (libs/events/__init__.py). A new event kind inherits this from its
    # stream's base; one declared apart from it would fail here.
    assert issubclass(kind, msgspec.Struct)
    assert kind.__struct_config__.gc is False


@pytest.mark.parametrize(
    ("codec", "event"),
    [
        (OPERATIONS, OperationCommitted(
            result={"granted": "x"},
            attempt=AttemptRecord(attempt=1, http_status=201, duration_ms=3.0),
        )),
        (INTERACTION, TurnReplied(text="ok", operations=(RepliedOperation(
            operation_id="op1", tool="t", status="accepted", batch_id="b1"
        ),))),
        (BATCHES, BatchDrained(
            final_delivery_id="d1", committed=1, failed=0,
            settled=(SettledMember(operation_id="op1", status="committed"),),
        )),
    ],
    ids=["operations", "interaction", "batches"],
)
def test_a_decoded_event_is_not_tracked(codec: EventCodec[typing.Any], event: object) -> None:
    decoded = codec.decode(codec.encode(envelope(event)))
    assert decoded.event == event
    assert not gc.is_tracked(decoded)
    assert not gc.is_tracked(decoded.event)
