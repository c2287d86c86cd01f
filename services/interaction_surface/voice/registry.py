"""The calls attached to this surface process, by session."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .call import Call


@dataclass
class CallRegistry:
    """The calls attached to this process, by session (the latest call wins)."""

    calls: dict[str, Call] = field(default_factory=dict)

    def get(self, session_id: str) -> Call | None:
        """The live call of a session, if this process holds one."""
        call = self.calls.get(session_id)
        return call if call is not None and not call.closed else None

    def attach(self, call: Call) -> None:
        """A call starts carrying its session's voice."""
        self.calls[call.session_id] = call

    def detach(self, call: Call) -> None:
        """The call ended."""
        if self.calls.get(call.session_id) is call:
            del self.calls[call.session_id]
