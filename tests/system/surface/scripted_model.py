"""A model that fails on cue, registered as `faulty` (via HOLDLINE_MODEL_MODULES).

It is the mock model, except that "explode" makes it raise ModelError and "hang" makes it
answer after the surface's model timeout.
"""

from __future__ import annotations

import asyncio

from demo.models import MockModel
from libs.models import register
from libs.models.interface import ModelError, TurnReply, TurnRequest


class FaultyModel(MockModel):
    """The mock, with two ways to fail."""

    name = "faulty"

    async def respond(self, request: TurnRequest) -> TurnReply:
        """Fail on cue, else answer as the mock."""
        if "explode" in request.user_text:
            raise ModelError("the model is down")
        if "hang" in request.user_text:
            await asyncio.sleep(30)
        return await super().respond(request)


register("faulty", FaultyModel)
