"""The create-once intent claims in KV: the only I/O of admission's duplicate policy.

A claim maps an intent key to the operation holding it (beyond the broker's duplicate
window and across restarts). What a plan becomes when the key is held is decided by the
pure functions of `plan.py`; this shell only creates, reads, updates and waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nats.js.errors import KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from libs.domain import OperationState

from .plan import claim_value, on_held_claim, reused_key
from .plan_types import Plan

# How long a claim without events is taken for an admission still writing them (another
# session of the same user racing this one) before it is adopted as a crashed one.
_HOLDER_GRACE_S = 3.0
_HOLDER_POLL_S = 0.05

StateOf = Callable[[str], Awaitable[OperationState | None]]


class IntentClaims:
    """Takes intents for plans, or finds who holds them."""

    def __init__(self, intents: KeyValue, state_of: StateOf) -> None:
        self._intents = intents
        self._state_of = state_of

    async def claim(self, plan: Plan) -> Plan:
        """Take the intent for this plan, or what the plan becomes when another holds it."""
        assert plan.intent_key is not None
        value = claim_value(plan)
        try:
            await self._intents.create(plan.intent_key, value)
        except KeyWrongLastSequenceError:
            pass
        else:
            return plan
        entry = await self._intents.get(plan.intent_key)
        holder, _, held_digest = (entry.value or b"").decode().partition("|")
        if (refused := reused_key(plan, held_digest)) is not None:
            return refused
        state = await self._holder(holder)
        decided = on_held_claim(plan, holder, state)
        if decided is not None:
            return decided
        try:
            await self._intents.update(plan.intent_key, value, last=entry.revision)
        except KeyWrongLastSequenceError:
            return await self.claim(plan)
        return plan

    async def create(self, key: str, value: bytes) -> None:
        """Take a key known to be new (an explicitly confirmed repeat)."""
        await self._intents.create(key, value)

    async def _holder(self, holder: str) -> OperationState | None:
        """The holder's state; a claim seen before its events is given time to write them."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _HOLDER_GRACE_S
        while True:
            state = await self._state_of(holder)
            if state is not None or loop.time() >= deadline:
                return state
            await asyncio.sleep(_HOLDER_POLL_S)
