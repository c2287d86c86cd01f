"""Hostile payloads against every stream's codec: each is refused with its reason, nothing else.

tests/unit/events/test_events.py covers arbitrary bytes and objects on the operations codec;
these properties start from *valid* envelopes of every stream and break one thing at a time,
so each refusal can be checked for the exact reason.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.events import EventCodec, EventDecodeError
from testkit.hostile import JSON, STREAMS, Stream, valid

codecs = st.sampled_from(list(STREAMS.values()))


def refusal(codec: EventCodec[Any], data: bytes) -> str:
    """The reason the codec gives; any other exception fails the property."""
    with pytest.raises(EventDecodeError) as info:
        codec.decode(data)
    assert info.value.detail
    return info.value.reason


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(pair=codecs, cut=st.integers(min_value=1, max_value=40), noise=st.binary(max_size=8))
def test_truncated_or_corrupted_bytes_are_malformed(
    pair: Stream, cut: int, noise: bytes
) -> None:
    codec, _union, event = pair
    raw = msgspec.json.encode(valid(codec, event))
    assert refusal(codec, raw[: max(len(raw) - cut, 0)] + b"\xff" + noise) == "malformed"


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(pair=codecs, tag=st.text(min_size=1, max_size=30))
def test_unknown_event_types_are_refused_as_such(
    pair: Stream, tag: str
) -> None:
    codec, union, event = pair
    obj = valid(codec, event)
    if tag in {member.__struct_config__.tag for member in union.__args__}:
        return
    obj["event"]["type"] = tag
    assert refusal(codec, msgspec.json.encode(obj)) == "unknown_type"


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(pair=codecs, version=JSON.filter(lambda v: v != 1 or isinstance(v, bool)))
def test_any_other_schema_version_is_refused_as_wrong_version(
    pair: Stream, version: Any
) -> None:
    codec, _union, event = pair
    obj = valid(codec, event)
    obj["schema_version"] = version
    assert refusal(codec, msgspec.json.encode(obj)) == "wrong_version"


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(pair=codecs, data=st.data())
def test_wrong_field_types_and_unknown_fields_are_invalid(
    pair: Stream, data: st.DataObject
) -> None:
    codec, _union, event = pair
    obj = valid(codec, event)
    where = data.draw(st.sampled_from(["envelope", "event", "extra_envelope", "extra_event"]))
    if where.startswith("extra"):
        target = obj if where == "extra_envelope" else obj["event"]
        name = data.draw(st.text(min_size=1, max_size=10).filter(lambda n: n not in target))
        target[name] = data.draw(JSON)
    else:
        target = obj if where == "envelope" else obj["event"]
        fixed = {"type", "schema_version"}
        names = sorted(k for k in target if k not in fixed)
        if not names:
            return
        name = data.draw(st.sampled_from(names))
        value = data.draw(JSON.filter(lambda v: not _fits(codec, obj, target, name, v)))
        target[name] = value
    assert refusal(codec, msgspec.json.encode(obj)) == "invalid"


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(pair=codecs, limit=st.integers(min_value=16, max_value=4096), pad=st.integers(1, 4096))
def test_anything_over_the_limit_is_oversized_before_it_is_parsed(
    pair: Stream, limit: int, pad: int
) -> None:
    _codec, union, _event = pair
    small: EventCodec[Any] = EventCodec(union, max_bytes=limit)
    # Not even JSON: size is checked first, so the reason is the size, not the syntax.
    assert refusal(small, b"\x00" * (limit + pad)) == "oversized"


def _fits(
    codec: EventCodec[Any], obj: dict[str, Any], target: dict[str, Any], name: str, value: Any
) -> bool:
    """Whether the replacement happens to be valid too (then there is nothing to refuse)."""
    old = target[name]
    target[name] = value
    try:
        codec.decode(msgspec.json.encode(obj))
    except EventDecodeError:
        return False
    finally:
        target[name] = old
    return True

