"""Control events: interruptions and cancellations, kept apart from ordinary events.

They travel on their own subject so they are never queued behind ordinary traffic.
"""

from __future__ import annotations

import msgspec


class _Control(
    msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="type"
):
    pass


class BargeIn(_Control, frozen=True, kw_only=True, tag="control.barge_in"):
    """The user spoke over the agent: cancel the voice (never the business)."""

    played_ms: int
    unheard_ms: int


class ResponseCancel(_Control, frozen=True, kw_only=True, tag="control.response_cancel"):
    """Cancel a model generation and the speech it would produce."""

    reason: str


class OperationCancel(_Control, frozen=True, kw_only=True, tag="control.operation_cancel"):
    """The user explicitly asked to stop an operation ("don't do the transfer")."""

    reason: str
    requested_by: str


class Backchannel(_Control, frozen=True, kw_only=True, tag="control.backchannel"):
    """The caller said a short acknowledgement ("mm-hmm") while the agent talked: not a turn."""

    text: str
    # Whether the agent carried on (backchannels configured to continue) or was cut.
    continued: bool


ControlEvent = BargeIn | ResponseCancel | OperationCancel | Backchannel
