"""A model that thinks for a while about notion, registered as `ponderous`.

It is the mock model, except that a request naming notion takes 1.5 s to answer: long enough
for the caller to speak again before anything is admitted.
"""

from __future__ import annotations

import asyncio

from demo.models import MockModel
from libs.models import register
from libs.models.interface import TurnReply, TurnRequest

THINKING_S = 1.5


class PonderousModel(MockModel):
    """The mock, slow on one word."""

    name = "ponderous"

    async def respond(self, request: TurnRequest) -> TurnReply:
        """Answer as the mock; after a pause when the request names notion."""
        if "notion" in request.user_text.lower():
            await asyncio.sleep(THINKING_S)
        return await super().respond(request)


register("ponderous", PonderousModel)
