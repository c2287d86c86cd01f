"""A read answered by a replica behind the stream leader is completed from the leader."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from nats.js import JetStreamContext

from libs.bus import Context, Topology, read_subject
from libs.events import OPERATIONS

# The module (the package exports a function of the same name).
replay_module = importlib.import_module("libs.bus.replay")


async def test_a_short_answer_is_completed_from_the_leader(
    js: JetStreamContext, topology: Topology, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = topology.stream_name(Context.OPERATIONS)
    subject = topology.operation_subject("s_stale", "op_stale")
    # One operation's kinds lie on their own subjects: the leader's last sequence and the
    # completion from the leader both take the operation's wildcard.
    kinds = ("admitted", "started", "committed")
    seqs = [
        (await js.publish(
            topology.operation_event_subject("s_stale", "op_stale", kind),
            f"not an event {i}".encode(),
        )).seq
        for i, kind in enumerate(kinds)
    ]
    real = replay_module._read_subject

    async def behind(*args: Any, **kwargs: Any) -> Any:
        # What a follower one write behind answers: everything but the newest message.
        out = await real(*args, **kwargs)
        out.rejected = out.rejected[:-1]
        out.last_seq = out.rejected[-1][0]
        return out

    monkeypatch.setattr(replay_module, "_read_subject", behind)
    stale = await read_subject(js, stream, subject, OPERATIONS, consistent=False)
    assert [seq for seq, _ in stale.rejected] == seqs[:2]
    read = await read_subject(js, stream, subject, OPERATIONS, consistent=True)
    assert [seq for seq, _ in read.rejected] == seqs
    assert read.last_seq == seqs[-1]
