"""Work commands: what the operation-worker is asked to do, on a work-queue stream."""

from __future__ import annotations

import msgspec


class _Command(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"
):
    pass


class ExecuteOperation(_Command, frozen=True, kw_only=True, tag="work.execute"):
    """Run (or resume) an admitted operation against the system of record."""


class ReconcileOperation(_Command, frozen=True, kw_only=True, tag="work.reconcile"):
    """Look an operation's effect up at the system of record before any resend."""


class CancelOperation(_Command, frozen=True, kw_only=True, tag="work.cancel"):
    """Cancel an operation; only a confirmed state may be reported as cancelled."""

    reason: str


WorkCommand = ExecuteOperation | ReconcileOperation | CancelOperation
