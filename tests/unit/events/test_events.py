"""The event contract: strict decoding at the edge, with a reason for every refusal."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.events import (
    INTERACTION,
    OPERATIONS,
    EventCodec,
    EventDecodeError,
    OperationAdmitted,
    OperationCommitted,
    OperationEvent,
    SessionOpened,
)
from testkit.events import envelope


def test_round_trip_keeps_every_identity() -> None:
    env = envelope(
        OperationCommitted(result={"granted": "github"}, provider_ref="acc_1"),
        session_id="s1",
        operation_id="op1",
        intent_key="ik",
        batch_id="b1",
        turn_id="t1",
    )
    decoded = OPERATIONS.decode(OPERATIONS.encode(env))
    assert decoded == env
    assert isinstance(decoded.event, OperationCommitted)
    assert (decoded.operation_id, decoded.intent_key, decoded.batch_id) == ("op1", "ik", "b1")


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda raw: raw[:-5], "malformed"),
        (lambda raw: b"not json", "malformed"),
        (lambda raw: raw.replace(b"operation.committed", b"operation.teleported"), "unknown_type"),
        (lambda raw: raw.replace(b'"schema_version":1', b'"schema_version":7'), "wrong_version"),
        (lambda raw: raw.replace(b'"provider_ref"', b'"surprise"'), "invalid"),
        (lambda raw: raw.replace(b'"session_id":"s1",', b""), "invalid"),
    ],
)
def test_bad_payloads_are_refused_with_a_reason(mutate: object, reason: str) -> None:
    raw = OPERATIONS.encode(envelope(OperationCommitted(result={})))
    assert callable(mutate)
    with pytest.raises(EventDecodeError) as info:
        OPERATIONS.decode(mutate(raw))
    assert info.value.reason == reason
    assert info.value.detail


def test_oversized_payload_is_refused_before_parsing() -> None:
    small: EventCodec[OperationEvent] = EventCodec(OperationEvent, max_bytes=300)
    big = envelope(OperationCommitted(result={"blob": "x" * 1000}))
    with pytest.raises(EventDecodeError) as info:
        small.encode(big)
    assert info.value.reason == "oversized"
    with pytest.raises(EventDecodeError) as info:
        small.decode(OPERATIONS.encode(big))
    assert info.value.reason == "oversized"


def test_an_event_of_another_stream_is_refused() -> None:
    raw = INTERACTION.encode(
        envelope(SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h"))
    )
    with pytest.raises(EventDecodeError) as info:
        OPERATIONS.decode(raw)
    assert info.value.reason == "unknown_type"


def test_events_are_immutable() -> None:
    event = OperationAdmitted(tool="x", arguments={}, tenant_id="t", user_id="u")
    with pytest.raises(AttributeError):
        event.tool = "y"  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512) | st.text(max_size=256).map(str.encode))
def test_decoding_arbitrary_bytes_only_ever_raises_decode_errors(data: bytes) -> None:
    reason = None
    try:
        OPERATIONS.decode(data)
    except EventDecodeError as exc:
        reason = exc.reason
    assert reason in {None, "malformed", "invalid", "unknown_type", "wrong_version"}


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["event_id", "occurred_at", "session_id", "event", "x"]), _json_values
    )
)
def test_decoding_arbitrary_json_objects_never_crashes(obj: dict[str, object]) -> None:
    reason = None
    try:
        OPERATIONS.decode(msgspec.json.encode(obj))
    except EventDecodeError as exc:
        reason = exc.reason
    assert reason != "oversized"
