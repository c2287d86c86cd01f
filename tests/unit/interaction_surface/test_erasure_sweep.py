"""Which erased sessions the eraser purges, and when: not while an operation runs, once the
business is settled (or every operation is terminal past the grace period), and again only
when the session's streams grew (a fake broker records the purges)."""

from __future__ import annotations

from typing import Any

import pytest

from libs.bus import Context, Topology
from libs.events import (
    DeliveryReady,
    OperationAdmitted,
    OperationCommitted,
    OperationStarted,
    SessionClosed,
    SessionOpened,
)
from services.interaction_surface.core import erasure
from services.interaction_surface.core.erasure import Eraser
from services.interaction_surface.core.view import SurfaceView
from testkit.events import envelope


class FakeJetStream:
    """Records every purge asked for."""

    def __init__(self) -> None:
        self.purges: list[tuple[str, str | None, int | None]] = []

    async def purge_stream(
        self, name: str, seq: int | None = None, subject: str | None = None,
        keep: int | None = None,
    ) -> bool:
        self.purges.append((name, subject, keep))
        return True


class Feed:
    """Events into the view, each stream numbered on its own."""

    def __init__(self, view: SurfaceView) -> None:
        self.view = view
        self.seqs: dict[Context, int] = {}

    def __call__(self, context: Context, event: Any, **ids: Any) -> None:
        self.seqs[context] = self.seqs.get(context, 0) + 1
        self.view.receive(context, envelope(event, session_id="s1", **ids), self.seqs[context])


def _admitted() -> OperationAdmitted:
    return OperationAdmitted(tool="t", arguments={"a": "zebra"}, tenant_id="t", user_id="u")


async def test_an_erased_session_is_purged_once_settled_and_again_when_it_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    view, js, topology = SurfaceView(), FakeJetStream(), Topology("hx")
    eraser = Eraser(view, topology, lambda: js)  # type: ignore[arg-type, return-value]
    feed = Feed(view)
    feed(Context.INTERACTION, SessionOpened(user_id="u", tenant_id="t", agent="a", token_hash="h"))
    feed(Context.OPERATIONS, _admitted(), operation_id="op1")
    feed(Context.INTERACTION, SessionClosed(reason="erased"))
    # At once: the interaction subject but its marker, control, dead letters, answers.
    await eraser.purge_now("s1")
    assert js.purges == [
        ("HX_INTERACTION", "hx.interaction.s1.session", 1),
        ("HX_CONTROL", "hx.control.s1.>", None),
        ("HX_DLQ", "hx.dlq.*.s1", None),
        ("KV_hx_turns", "$KV.hx_turns.s1.>", None),
    ]
    js.purges.clear()
    # The operation still runs: its events are the worker's state.
    assert await eraser.sweep() == 0
    feed(Context.OPERATIONS, OperationStarted(worker_id="w", attempt=1), operation_id="op1")
    feed(Context.OPERATIONS, OperationCommitted(result={}), operation_id="op1")
    assert [o.status.value for o in view.session_operations("s1")] == ["committed"]
    feed(
        Context.DELIVERIES,
        DeliveryReady(kind="final", text="zebra", short_text="z", source_operation_ids=("op1",)),
        delivery_id="d1",
    )
    # A closing still open: not before the grace period.
    assert await eraser.sweep() == 0
    monkeypatch.setattr(erasure, "GRACE_S", 0.0)
    assert await eraser.sweep() == 1
    purged = {name for name, _subject, _keep in js.purges}
    assert purged >= {"HX_OPERATIONS", "HX_BATCHES", "HX_DELIVERIES", "HX_WORK", "HX_DLQ"}
    assert ("HX_OPERATIONS", "hx.operations.s1.>", None) in js.purges
    # Nothing new: nothing to do; a late event: purged again.
    js.purges.clear()
    assert await eraser.sweep() == 0
    assert js.purges == []
    feed(Context.OPERATIONS, OperationCommitted(result={"late": True}), operation_id="op1")
    assert await eraser.sweep() == 1
