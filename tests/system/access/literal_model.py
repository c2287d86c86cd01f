"""A model registered as `literal` (via HOLDLINE_MODEL_MODULES): `call <tool> <json>` makes it
propose exactly that call, as a real model may, with arguments the mock would never build;
`cancel <operation id>` and `undo <operation id>` request exactly that. Any other text is
answered by the mock model."""

from __future__ import annotations

import json

from demo.models import MockModel
from libs.models import register
from libs.models.interface import ProposedCall, TurnReply, TurnRequest, call_id


class LiteralModel(MockModel):
    """The mock, plus verbatim tool calls."""

    name = "literal"

    async def respond(self, request: TurnRequest) -> TurnReply:
        """A verbatim call for `call <tool> <json>`, else the mock's answer."""
        command, _, rest = request.user_text.partition(" ")
        if command == "call":
            tool, _, raw = rest.partition(" ")
            call = ProposedCall(tool, json.loads(raw), call_id(request.turn_id, 0))
            return TurnReply(text="", calls=(call,))
        if command in ("cancel", "undo"):
            # Operation ids straight from the user, whosever they are.
            ids = tuple(rest.split())
            if command == "cancel":
                return TurnReply(text="", cancels=ids)
            return TurnReply(text="", compensations=ids)
        return await super().respond(request)


register("literal", LiteralModel)
