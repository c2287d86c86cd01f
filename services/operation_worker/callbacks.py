"""A provider's verified callback, applied to its operation once."""

from __future__ import annotations

import re

from libs.bus import ConflictRetry, Topology
from libs.domain import OpStatus
from libs.tools import CallbackResult, ToolRegistry

from .domain import completion_events
from .history import OperationHistory, Stale

# An operation id is one subject token: anything else in a callback names no operation.
_OPERATION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

# A callback, validly signed, about an operation that another executor runs.
FOREIGN = "foreign_operation"


class ProviderCallbacks:
    """Completes operations from their executors' callbacks."""

    def __init__(
        self,
        history: OperationHistory,
        topology: Topology,
        registry: ToolRegistry,
        retry: ConflictRetry,
    ) -> None:
        self._history = history
        self._topology = topology
        self._registry = registry
        self._retry = retry

    async def complete(self, callback: CallbackResult, route: str) -> str:
        """Apply a verified provider callback once; a duplicate or late one changes nothing.

        Only the executor that runs the operation's tool may complete it: a provider's valid
        signature says nothing about another provider's operations.
        """
        operation_id, found = callback.operation_id, callback.found
        session_id = callback.session_id or await self._session_of(operation_id)
        if session_id is None:
            return "unknown_operation"
        for _ in range(self._retry.attempts):
            op = await self._history.load(session_id, operation_id)
            if op is None or op.state.operation_id != operation_id:
                return "unknown_operation"
            if not self._registry.completes(route, op.state.tool):
                return FOREIGN
            if op.state.terminal:
                return "already_terminal"
            cancel = op.state.status is OpStatus.CANCEL_REQUESTED
            events = completion_events(found, "callback", cancel_requested=cancel)
            if not events:
                return "still_pending"
            try:
                await self._history.append(op, *events)
            except Stale:
                continue
            return "applied"
        return "raced"

    async def _session_of(self, operation_id: str) -> str | None:
        """The session of an operation known only by id (a provider that echoes only our key)."""
        if not _OPERATION_ID.match(operation_id):
            return None
        loaded = await self._history.read(self._topology.operation_anywhere(operation_id))
        return loaded.state.session_id if loaded.state is not None else None
